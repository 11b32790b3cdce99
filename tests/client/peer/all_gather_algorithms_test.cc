// What both all_gather algorithms of the direct plane (RingAllGather and
// BruckAllGather, client/peer) must do, each over real mutual-TLS peer
// links on 127.0.0.1: byte-exact results for every world size with equal,
// uneven, empty, broadcast-like and tiny parts, in place too; a silent
// member fails the others within the stall timeout, naming it; a chunk of
// another op is DATA_LOSS.
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/peer/collective_test_data.h"
#include "tests/client/peer/peer_test_pki.h"

namespace fedgather {
namespace {

using testing::Expected;
using testing::GatherCall;
using ::testing::HasSubstr;
using testing::MakeRing;
using testing::Part;
using testing::PeerTestPki;
using testing::RankOutcome;
using testing::RunGather;
using testing::TestRing;

struct Algorithm {
  const char* name;
  GatherCall (*over)(const TestRing& ring);
};

class AllGatherAlgorithmTest : public ::testing::TestWithParam<Algorithm> {
 protected:
  // Gather runs one all_gather of the algorithm on `ring`.
  RankOutcome Gather(const TestRing& ring, const std::vector<size_t>& sizes,
                     const std::vector<RingOptions>& options, uint32_t seed,
                     int absent = -1) {
    return RunGather(GetParam().over(ring), sizes, options, seed, absent);
  }
};

TEST_P(AllGatherAlgorithmTest, EveryRankGetsEveryPartByteForByte) {
  PeerTestPki pki;
  for (int world : {1, 2, 3, 4, 5, 8}) {
    SCOPED_TRACE(absl::StrCat("N = ", world));
    TestRing ring = MakeRing(pki, world);
    RingOptions options;
    options.chunk_bytes = 4096;  // many chunks per part
    // Several ops on the same links: equal, uneven with empty parts, a
    // broadcast's (only rank N/2's part), tiny.
    const std::vector<std::vector<size_t>> cases = {
        std::vector<size_t>(world, 40000),
        [&] {
          std::vector<size_t> sizes;
          for (int r = 0; r < world; ++r)
            sizes.push_back(r % 3 == 1 ? 0 : 4096 * r + 17);
          return sizes;
        }(),
        [&] {
          std::vector<size_t> sizes(world, 0);
          sizes[world / 2] = 9000;
          return sizes;
        }(),
        std::vector<size_t>(world, 1)};
    for (size_t c = 0; c < cases.size(); ++c) {
      options.op = c + 1;
      const RankOutcome outcome = Gather(
          ring, cases[c], std::vector<RingOptions>(world, options), 7 + c);
      const std::string expected = Expected(cases[c], 7 + c);
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(outcome.status[r].ok()) << outcome.status[r];
        EXPECT_TRUE(outcome.out[r] == expected)
            << "rank " << r << ", case " << c;
      }
    }
  }
}

TEST_P(AllGatherAlgorithmTest, InPlaceAndLargePartsWithTheDefaultChunks) {
  PeerTestPki pki;
  TestRing ring = MakeRing(pki, 5);
  const std::vector<size_t> sizes = {3 << 20, 0, 3000, (1 << 20) + 5, 1};
  const std::string expected = Expected(sizes, 3);
  std::vector<std::string> out(5, std::string(expected.size(), '?'));
  std::vector<absl::Status> status(5);
  const GatherCall gather = GetParam().over(ring);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 5; ++r) {
    ranks.emplace_back([&, r] {
      // Each rank's part is already in its place in `out`.
      size_t offset = 0;
      for (int p = 0; p < r; ++p) offset += sizes[p];
      const std::string mine = Part(r, sizes[r], 3);
      std::copy(mine.begin(), mine.end(), out[r].begin() + offset);
      status[r] = gather(r, sizes, out[r].data() + offset, out[r].data(), {});
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 5; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    EXPECT_TRUE(out[r] == expected) << "rank " << r;
  }
}

TEST_P(AllGatherAlgorithmTest,
       AMemberThatStopsFailsEveryOtherRankWithinTheStallTimeout) {
  PeerTestPki pki;
  TestRing ring = MakeRing(pki, 5);
  RingOptions options;
  options.stall_timeout = absl::Milliseconds(500);
  const absl::Time start = absl::Now();
  // Rank 2 never takes part.
  const RankOutcome outcome =
      Gather(ring, std::vector<size_t>(5, 20000),
             std::vector<RingOptions>(5, options), 1, /*absent=*/2);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (int r : {0, 1, 3, 4}) {
    EXPECT_FALSE(outcome.status[r].ok()) << "rank " << r;
  }
  // Rank 3 waits first on its link from rank 2 and names it.
  EXPECT_EQ(outcome.status[3].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(outcome.status[3].message(), HasSubstr("rank 2 ('site-2')"));
}

TEST_P(AllGatherAlgorithmTest, AChunkOfAnotherOpIsDataLoss) {
  PeerTestPki pki;
  TestRing ring = MakeRing(pki, 2);
  std::vector<RingOptions> options(2);
  options[0].op = 1;
  options[1].op = 2;
  const RankOutcome outcome =
      Gather(ring, std::vector<size_t>(2, 10), options, 4);
  // Each rank sees the other's chunk, unless the other, failing first,
  // broke the links before it read it.
  int data_loss = 0;
  for (int r = 0; r < 2; ++r) {
    const absl::Status& status = outcome.status[r];
    if (status.code() == absl::StatusCode::kDataLoss) {
      ++data_loss;
      EXPECT_THAT(status.message(),
                  HasSubstr(r == 0 ? "a chunk of op 2, part 1, 10 bytes came "
                                     "where op 1, part 1, 10 bytes"
                                   : "a chunk of op 1, part 0, 10 bytes came "
                                     "where op 2, part 0, 10 bytes"));
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    }
  }
  EXPECT_GE(data_loss, 1);
}

INSTANTIATE_TEST_SUITE_P(
    RingAndLogSteps, AllGatherAlgorithmTest,
    ::testing::Values(Algorithm{"Ring", &testing::RingGatherOver},
                      Algorithm{"LogSteps", &testing::BruckGatherOver}),
    [](const ::testing::TestParamInfo<Algorithm>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace fedgather
