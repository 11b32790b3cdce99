// What only the ring all_gather does (the rest: all_gather_algorithms_
// test.cc), over real mutual-TLS peer links on 127.0.0.1: which ranks a
// tampering forwarder reaches, and what one closed link does.
#include "client/peer/ring_all_gather.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/peer/collective_test_data.h"
#include "tests/client/peer/peer_test_pki.h"

namespace fedgather {
namespace {

using testing::Expected;
using ::testing::HasSubstr;
using testing::MakeRing;
using testing::PeerTestPki;
using testing::RankOutcome;
using testing::RingGatherOver;
using testing::RunGather;
using testing::TestRing;

TEST(RingAllGather, AForwardedChangeReachesOnlyTheRanksDownstream) {
  // The ring alone cannot tell a changed part (the commit's digests do,
  // in the data plane); this shows which ranks a tampering forwarder
  // reaches, the property the digests must cover.
  PeerTestPki pki;
  TestRing ring = MakeRing(pki, 4);
  const std::vector<size_t> sizes(4, 10000);
  std::vector<RingOptions> options(4);
  options[1].forward_hook = [](int part, char* data, size_t size) {
    if (part == 0) data[0] ^= 1;
  };
  const RankOutcome outcome =
      RunGather(RingGatherOver(ring), sizes, options, 5);
  const std::string expected = Expected(sizes, 5);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(outcome.status[r].ok()) << outcome.status[r];
  }
  EXPECT_TRUE(outcome.out[0] == expected);
  EXPECT_TRUE(outcome.out[1] == expected);
  // Ranks 2 and 3 got part 0 with its first byte changed, nothing else.
  for (int r : {2, 3}) {
    EXPECT_EQ(outcome.out[r][0], static_cast<char>(expected[0] ^ 1));
    EXPECT_EQ(outcome.out[r].substr(1), expected.substr(1));
  }
}

TEST(RingAllGather, AClosedLinkFailsTheRanksAtOnce) {
  PeerTestPki pki;
  TestRing ring = MakeRing(pki, 3);
  ring.to_next(0)->Abort();  // rank 0's link to rank 1 breaks
  RingOptions options;
  options.stall_timeout = absl::Seconds(20);
  const absl::Time start = absl::Now();
  const RankOutcome outcome =
      RunGather(RingGatherOver(ring), std::vector<size_t>(3, 100000),
                std::vector<RingOptions>(3, options), 2);
  // Rank 1 hears of the break through its link; ranks 0 and 2 fail from it.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(outcome.status[0].code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(outcome.status[1].code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(outcome.status[1].message(), HasSubstr("rank 0 ('site-0')"));
  EXPECT_EQ(outcome.status[2].code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace fedgather
