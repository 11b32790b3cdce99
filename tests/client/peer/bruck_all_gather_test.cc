// What only the log-step all_gather does (the rest: all_gather_algorithms_
// test.cc), over real mutual-TLS peer links on 127.0.0.1: where each part
// arrives from, which ranks a tampering forwarder reaches, and what one
// broken link that is not the ring's does.
#include "client/peer/bruck_all_gather.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/peer/collective_test_data.h"
#include "tests/client/peer/peer_test_pki.h"

namespace fedgather {
namespace {

using testing::BruckGatherOver;
using testing::Expected;
using ::testing::HasSubstr;
using testing::MakeRing;
using testing::PeerTestPki;
using testing::RankOutcome;
using testing::RunGather;
using testing::TestRing;

TEST(BruckArrivalStep, IsTheFloorOfTheDistancesLog) {
  EXPECT_EQ(BruckArrivalStep(1), 0);
  EXPECT_EQ(BruckArrivalStep(2), 1);
  EXPECT_EQ(BruckArrivalStep(3), 1);
  EXPECT_EQ(BruckArrivalStep(4), 2);
  EXPECT_EQ(BruckArrivalStep(7), 2);
  EXPECT_EQ(BruckArrivalStep(8), 3);
  EXPECT_EQ(BruckArrivalStep(63), 5);
}

TEST(BruckAllGather, AForwardedChangeReachesOnlyTheRanksItIsForwardedTo) {
  // N = 8: rank 1 gets part 0 at step 0 and forwards it to rank 3 (step 1)
  // and rank 5 (step 2); rank 3 forwards it to rank 7 (step 2). Ranks 2, 4
  // and 6 get it from rank 0 or through rank 2. The digests must cover
  // exactly this: the data plane names the link each part arrived on.
  PeerTestPki pki;
  TestRing ring = MakeRing(pki, 8);
  const std::vector<size_t> sizes(8, 3000);
  std::vector<RingOptions> options(8);
  options[1].forward_hook = [](int part, char* data, size_t) {
    if (part == 0) data[0] ^= 1;
  };
  const RankOutcome outcome =
      RunGather(BruckGatherOver(ring), sizes, options, 5);
  const std::string expected = Expected(sizes, 5);
  for (int r = 0; r < 8; ++r) {
    ASSERT_TRUE(outcome.status[r].ok()) << outcome.status[r];
    const bool reached = r == 3 || r == 5 || r == 7;
    if (!reached) {
      EXPECT_TRUE(outcome.out[r] == expected) << "rank " << r;
      continue;
    }
    EXPECT_EQ(outcome.out[r][0], static_cast<char>(expected[0] ^ 1))
        << "rank " << r;
    EXPECT_EQ(outcome.out[r].substr(1), expected.substr(1)) << "rank " << r;
  }
}

TEST(BruckAllGather, ABrokenChordFailsTheRanksOnItAtOnce) {
  PeerTestPki pki;
  TestRing ring = MakeRing(pki, 4);
  ring.to[0][1]->Abort();  // rank 0's link to rank 2 breaks
  RingOptions options;
  options.stall_timeout = absl::Seconds(20);
  const absl::Time start = absl::Now();
  const RankOutcome outcome =
      RunGather(BruckGatherOver(ring), std::vector<size_t>(4, 5000),
                std::vector<RingOptions>(4, options), 2);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // Rank 0 cannot send its step 1, rank 2 cannot receive it and names the
  // link; ranks 1 and 3 may have finished before the failure reached
  // them (the data plane's Delivery fails the round for them too).
  EXPECT_EQ(outcome.status[0].code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(outcome.status[2].code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(outcome.status[2].message(), HasSubstr("rank 0 ('site-0')"));
  for (int r : {1, 3}) {
    EXPECT_TRUE(outcome.status[r].ok() ||
                outcome.status[r].code() == absl::StatusCode::kUnavailable)
        << "rank " << r << ": " << outcome.status[r];
  }
}

}  // namespace
}  // namespace fedgather
