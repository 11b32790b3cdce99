#include "client/cli/progress_reporter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace fedgather::cli {
namespace {

std::string MiB(int64_t bytes) {
  return absl::StrFormat("%.1f", static_cast<double>(bytes) / 1048576.0);
}

std::string Of(int64_t done, int64_t total) {
  return total >= 0 ? absl::StrCat(MiB(done), "/", MiB(total), " MiB")
                    : absl::StrCat(MiB(done), " MiB");
}

}  // namespace

std::string ProgressLine(int64_t sent, int64_t received, int headers,
                         const ProgressTotals& totals, absl::Duration elapsed,
                         bool tty) {
  const bool known = totals.download_bytes >= 0;
  const int64_t total =
      totals.upload_bytes + std::max<int64_t>(totals.download_bytes, 0);
  const int64_t done = sent + received;
  const double seconds = std::max(absl::ToDoubleSeconds(elapsed), 1e-3);
  const double rate = static_cast<double>(done) / seconds;  // bytes/s
  const double fraction = known && total > 0
                              ? std::min(1.0, static_cast<double>(done) /
                                                  static_cast<double>(total))
                              : 0;
  std::string missing;
  if (totals.other_ranks >= 0 && headers < totals.other_ranks) {
    missing =
        absl::StrCat(totals.other_ranks - headers, " rank(s) not started");
  }
  // No ETA while ranks have not started: the time is theirs to choose.
  std::string eta;
  if (known && rate > 0 && done < total && missing.empty()) {
    eta =
        absl::StrFormat("ETA %.1f s", static_cast<double>(total - done) / rate);
  }
  const std::string up = absl::StrCat("up ", Of(sent, totals.upload_bytes));
  const std::string down =
      absl::StrCat("down ", Of(received, totals.download_bytes));
  const std::string speed = absl::StrFormat("%.1f MiB/s", rate / 1048576.0);
  if (tty) {
    constexpr int kWidth = 20;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string line = absl::StrCat("[", std::string(filled, '#'),
                                    std::string(kWidth - filled, '-'), "]");
    if (known)
      absl::StrAppend(
          &line, absl::StrFormat(" %3d%%", static_cast<int>(fraction * 100)));
    absl::StrAppend(&line, "  ", up, "  ", down, "  ", speed);
    if (!eta.empty()) absl::StrAppend(&line, "  ", eta);
    if (!missing.empty()) absl::StrAppend(&line, "  ", missing);
    return line;
  }
  std::string line = absl::StrCat("progress: ", up, ", ", down);
  if (known) {
    absl::StrAppend(
        &line, absl::StrFormat(" (%d%%)", static_cast<int>(fraction * 100)));
  }
  absl::StrAppend(&line, ", ", speed);
  if (!eta.empty()) absl::StrAppend(&line, ", ", eta);
  if (!missing.empty()) absl::StrAppend(&line, ", ", missing);
  return line;
}

ProgressReporter::ProgressReporter(const TransferProgress* progress,
                                   ProgressTotals totals, bool tty,
                                   std::FILE* out, absl::Duration period,
                                   Clock* clock)
    : progress_(progress),
      totals_(totals),
      tty_(tty),
      out_(out),
      period_(tty ? absl::Milliseconds(200) : period),
      clock_(clock),
      start_(clock->Now()),
      thread_([this] { Run(); }) {}

ProgressReporter::~ProgressReporter() {
  stop_.Notify();
  thread_.join();
  if (tty_) Report(/*final=*/true);
}

void ProgressReporter::Run() {
  while (!stop_.WaitForNotificationWithTimeout(period_)) Report(false);
}

void ProgressReporter::Report(bool final) {
  const std::string line =
      ProgressLine(progress_->payload_bytes_sent.load(),
                   progress_->payload_bytes_received.load(),
                   progress_->headers_received.load(), totals_,
                   clock_->Now() - start_, tty_);
  if (tty_) {
    // \r and clear-to-end-of-line redraw the bar in place.
    std::fprintf(out_, "\r%s\x1b[K%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

}  // namespace fedgather::cli
