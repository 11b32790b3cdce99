// OpenConnections: the TCP connections the server accepted and handed to
// gRPC, counted by peer address, for the connection caps
// (server/access/connection_gate.h). gRPC closes a connection without telling
// its owner, so each entry remembers its socket's identity (device and inode)
// and is dropped once its fd is closed or refers to another file: a closed
// socket's fd number may be reused, never its inode while it is open.
//
// Counts are exact when they are returned: the entries counted are checked
// with fstat first. Tracked() is the cheap upper bound (closed entries not
// yet dropped included).
//
// Thread safety: every method may be called from any thread.
#ifndef FEDGATHER_SERVER_ACCESS_OPEN_CONNECTIONS_H_
#define FEDGATHER_SERVER_ACCESS_OPEN_CONNECTIONS_H_

#include <sys/types.h>

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace fedgather::server {

class OpenConnections {
 public:
  // Add records `fd`, a socket accepted from `address` (a numeric IP) and
  // still owned by the caller. An entry already held for the same fd number
  // is replaced (that socket was closed). INTERNAL when fstat fails.
  absl::Status Add(int fd, const std::string& address);
  // CountFrom returns how many recorded connections from `address` are
  // still open, dropping those that are not.
  int CountFrom(const std::string& address);
  // Count returns how many recorded connections are still open, dropping
  // those that are not. O(connections) fstat calls.
  int Count() const;
  // Tracked returns how many entries are held, open or not, at no cost.
  int Tracked() const;

 private:
  struct Entry {
    dev_t device;
    ino_t inode;
    std::string address;
  };
  static bool StillOpen(int fd, const Entry& entry);
  void Drop(std::map<int, Entry>::iterator it) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  // By fd number; the fds of each address.
  mutable std::map<int, Entry> by_fd_ ABSL_GUARDED_BY(mu_);
  mutable std::multimap<std::string, int> by_address_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_ACCESS_OPEN_CONNECTIONS_H_
