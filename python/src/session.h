// Session: one joined fedgather group, as the Python module holds it: the
// Client (the mutual-TLS channel) and the Group made from it, kept together
// so that the Group never outlives its Client.
//
// Thread safety: as Group's; a Session is shared (std::shared_ptr) by the
// Python objects and the ProcessGroup that use it, and it leaves the group
// when the last of them lets go.
#ifndef FEDGATHER_PYTHON_SRC_SESSION_H_
#define FEDGATHER_PYTHON_SRC_SESSION_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/group.h"

namespace fedgather::python {

struct SessionOptions {
  std::string server;   // HOST:PORT
  std::string tls_dir;  // cert.pem, key.pem, ca.pem (`fedgather provision`)
  std::string group;
  int world_size = 0;
  std::optional<int> rank;  // unset: the server assigns by sorted identity
  absl::Duration join_timeout = absl::Minutes(5);
  // JoinOptions::peer_listen and peer_advertise (empty: none).
  std::string peer_listen;
  std::string peer_advertise;
};

class Session {
 public:
  // Join reads the TLS directory, connects and blocks until the group has
  // formed. Errors are Client::Join's, and ReadTlsDir's (NOT_FOUND names the
  // missing file).
  static absl::StatusOr<std::shared_ptr<Session>> Join(
      const SessionOptions& options);

  ~Session();

  Group& group() const { return *group_; }
  const std::string& server() const { return server_; }

 private:
  Session(std::string server, std::unique_ptr<Client> client,
          std::unique_ptr<Group> group);

  const std::string server_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<Group> group_;  // destroyed first (see ~Session)
};

}  // namespace fedgather::python

#endif  // FEDGATHER_PYTHON_SRC_SESSION_H_
