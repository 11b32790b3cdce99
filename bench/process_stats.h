// ProcessStats: what a benchmark reads about another process of the same
// user from /proc: its CPU time, its peak resident set, and a reset of that
// peak, so that one measurement's peak is not an earlier one's.
//
// Linux only. Each call reads (or writes) one /proc file; none blocks beyond
// that. Thread-safe: no state.
#ifndef FEDGATHER_BENCH_PROCESS_STATS_H_
#define FEDGATHER_BENCH_PROCESS_STATS_H_

#include <sys/types.h>

#include <cstdint>

#include "absl/status/statusor.h"

namespace fedgather::bench {

// CpuSeconds returns the user plus system CPU time of every thread of `pid`
// (/proc/PID/stat utime + stime), in seconds; its resolution is one clock
// tick (usually 10 ms). NOT_FOUND when the process is gone; INTERNAL when
// the file does not parse.
absl::StatusOr<double> CpuSeconds(pid_t pid);

// PeakRssBytes returns VmHWM of /proc/PID/status: the peak resident set since
// the process started or since the last ResetPeakRss.
absl::StatusOr<int64_t> PeakRssBytes(pid_t pid);

// ResetPeakRss sets the peak resident set of `pid` to its current one
// (writes "5" to /proc/PID/clear_refs; Linux 4.0+). PERMISSION_DENIED or
// NOT_FOUND from the write.
absl::Status ResetPeakRss(pid_t pid);

}  // namespace fedgather::bench

#endif  // FEDGATHER_BENCH_PROCESS_STATS_H_
