// FailingAuditDisk: audit file calls (server/observe/audit_log.h
// AuditFileCalls) that fail on demand, so tests see the audit log's failure
// policy without a full disk. Thread-safe: the switches may flip while the
// writer runs.
#ifndef FEDGATHER_TESTS_SERVER_OBSERVE_FAILING_AUDIT_DISK_H_
#define FEDGATHER_TESTS_SERVER_OBSERVE_FAILING_AUDIT_DISK_H_

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>

#include "server/observe/audit_log.h"

namespace fedgather::server {

struct FailingAuditDisk {
  // While set, writes (fsyncs) fail with this errno.
  std::atomic<int> write_errno{0};
  std::atomic<int> fsync_errno{0};
  // The next failing write first writes this many bytes of its line, as a
  // disk that fills up in the middle of a line does.
  std::atomic<size_t> partial_bytes{0};

  // Calls returns file calls that consult the switches; the disk must
  // outlive the log that uses them.
  AuditFileCalls Calls() {
    AuditFileCalls calls;
    calls.write = [this](int fd, const void* data, size_t size) -> ssize_t {
      if (const int error = write_errno.load(); error != 0) {
        const size_t partial = std::min(partial_bytes.exchange(0), size);
        if (partial > 0) return ::write(fd, data, partial);
        errno = error;
        return -1;
      }
      return ::write(fd, data, size);
    };
    calls.fsync = [this](int fd) {
      if (const int error = fsync_errno.load(); error != 0) {
        errno = error;
        return -1;
      }
      return ::fsync(fd);
    };
    return calls;
  }
};

}  // namespace fedgather::server

#endif  // FEDGATHER_TESTS_SERVER_OBSERVE_FAILING_AUDIT_DISK_H_
