// ProgressLine: the bar on a terminal and the line elsewhere, with the
// percentage, rate, ETA and missing ranks when they are known.
#include <gtest/gtest.h>

#include "client/cli/progress_reporter.h"

namespace fedgather::cli {
namespace {

constexpr int64_t kMiB = 1 << 20;

TEST(ProgressLineTest, TheLineOffATerminal) {
  ProgressTotals totals{4 * kMiB, 12 * kMiB, 3};
  EXPECT_EQ(ProgressLine(4 * kMiB, 4 * kMiB, 2, totals, absl::Seconds(2),
                         /*tty=*/false),
            "progress: up 4.0/4.0 MiB, down 4.0/12.0 MiB (50%), 4.0 MiB/s, "
            "1 rank(s) not started");
  EXPECT_EQ(
      ProgressLine(4 * kMiB, 4 * kMiB, 3, totals, absl::Seconds(2), false),
      "progress: up 4.0/4.0 MiB, down 4.0/12.0 MiB (50%), 4.0 MiB/s, "
      "ETA 2.0 s");
  // Done: no ETA; every rank started: nothing missing.
  EXPECT_EQ(
      ProgressLine(4 * kMiB, 12 * kMiB, 3, totals, absl::Seconds(4), false),
      "progress: up 4.0/4.0 MiB, down 12.0/12.0 MiB (100%), 4.0 MiB/s");
}

TEST(ProgressLineTest, TheBarOnATerminal) {
  ProgressTotals totals{4 * kMiB, 12 * kMiB, 3};
  EXPECT_EQ(ProgressLine(4 * kMiB, 4 * kMiB, 3, totals, absl::Seconds(2),
                         /*tty=*/true),
            "[##########----------]  50%  up 4.0/4.0 MiB  down 4.0/12.0 MiB  "
            "4.0 MiB/s  ETA 2.0 s");
}

TEST(ProgressLineTest, UnknownTotalsShowBytesOnly) {
  ProgressTotals totals{2 * kMiB, -1, -1};  // all_gather_v: size unknown
  EXPECT_EQ(
      ProgressLine(2 * kMiB, 1 * kMiB, 0, totals, absl::Seconds(1), false),
      "progress: up 2.0/2.0 MiB, down 1.0 MiB, 3.0 MiB/s");
}

}  // namespace
}  // namespace fedgather::cli
