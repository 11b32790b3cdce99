// ProcessStats: what a running process holds, read from /proc/<pid> (Linux):
// its resident memory, open file descriptors and threads. The soak test
// and the fault tests sample the server process with it.
#ifndef FEDGATHER_TESTS_COMMON_PROCESS_STATS_H_
#define FEDGATHER_TESTS_COMMON_PROCESS_STATS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace fedgather::testing {

struct ProcessStats {
  int64_t rss_kib = 0;       // VmRSS
  int64_t peak_rss_kib = 0;  // VmHWM: the most it has ever been resident
  int fds = 0;               // entries of /proc/<pid>/fd
  int threads = 0;

  std::string ToString() const;
};

// ReadProcessStats reads `pid`'s stats now. NOT_FOUND when the process is
// gone; INTERNAL when /proc cannot be read or parsed.
absl::StatusOr<ProcessStats> ReadProcessStats(pid_t pid);

// ReadSettledProcessStats reads `pid`'s stats once its descriptor count has
// held still over three reads 100 ms apart: a connection the test just cut
// takes the process a moment to close, and /proc offers nothing to wait on.
// Gives up after `timeout` and returns the last read.
absl::StatusOr<ProcessStats> ReadSettledProcessStats(pid_t pid,
                                                     absl::Duration timeout);

// FdsAfter polls `pid`'s descriptor count until it is at most `most` and
// returns it; after `bound` it returns the last count read (-1 when /proc
// cannot be read).
int FdsAfter(pid_t pid, int most, absl::Duration bound);

}  // namespace fedgather::testing

#endif  // FEDGATHER_TESTS_COMMON_PROCESS_STATS_H_
