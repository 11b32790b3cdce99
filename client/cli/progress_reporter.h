// ProgressReporter: what `fedgather join` shows while its collective runs,
// read from a TransferProgress the collective updates. On a terminal it
// redraws one bar in place every 200 ms:
//   [##########----------]  50%  up 4.0/4.0 MiB  down 6.0/12.0 MiB
//     31.2 MiB/s  ETA 0.3 s
// Elsewhere (a log, a pipe) it prints one line every `period`:
//   progress: up 4.0/4.0 MiB, down 6.0/12.0 MiB (50%), 31.2 MiB/s,
//     1 rank(s) not started
// (the ETA is left out while ranks have not started).
// A download total of -1 means unknown (all_gather_v and all_gather_bytes:
// it depends on the other ranks): the bytes are shown without a percentage
// or ETA. So is the rank
// count when `other_ranks` is negative (ops whose ranks' headers are not
// relayed).
#ifndef FEDGATHER_CLIENT_CLI_PROGRESS_REPORTER_H_
#define FEDGATHER_CLIENT_CLI_PROGRESS_REPORTER_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/collective_call.h"
#include "common/clock.h"

namespace fedgather::cli {

struct ProgressTotals {
  int64_t upload_bytes = 0;
  int64_t download_bytes = -1;  // -1: unknown
  int other_ranks = -1;         // ranks whose headers will arrive; -1: none
};

// ProgressLine renders one report; `tty` picks the bar or the line form.
std::string ProgressLine(int64_t sent, int64_t received, int headers,
                         const ProgressTotals& totals, absl::Duration elapsed,
                         bool tty);

class ProgressReporter {
 public:
  // Starts reporting `progress` (which must outlive this object) to `out`;
  // the elapsed time is read on `clock` (which must outlive it too).
  ProgressReporter(const TransferProgress* progress, ProgressTotals totals,
                   bool tty, std::FILE* out,
                   absl::Duration period = absl::Seconds(2),
                   Clock* clock = SystemClock());
  // Stops; on a terminal, ends the bar's line.
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

 private:
  void Run();
  void Report(bool final);

  const TransferProgress* const progress_;
  const ProgressTotals totals_;
  const bool tty_;
  std::FILE* const out_;
  const absl::Duration period_;
  Clock* const clock_;
  const absl::Time start_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace fedgather::cli

#endif  // FEDGATHER_CLIENT_CLI_PROGRESS_REPORTER_H_
