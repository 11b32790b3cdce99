// What both all_reduce algorithms of the direct plane (RingAllReduce and
// GatherAllReduce, client/peer) must do, each over real mutual-TLS peer
// links on 127.0.0.1: every rank ends with the same bytes, equal to a
// reference folded in the algorithm's documented order, for every op,
// dtype and world size; integer sums and MIN/MAX equal plain arithmetic;
// a silent member fails the others within the stall timeout, naming it.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/peer/collective_test_data.h"
#include "tests/client/peer/peer_test_pki.h"

namespace fedgather {
namespace {

using testing::Contribution;
using testing::FoldOrder;
using testing::MakeRing;
using testing::PeerTestPki;
using testing::RankOutcome;
using testing::ReduceCall;
using testing::ReduceCase;
using testing::ReduceCases;
using testing::TestRing;

struct Algorithm {
  const char* name;
  ReduceCall (*over)(const TestRing& ring);
  std::vector<int> (*order)(int64_t element, int64_t elements, int world);
};

class AllReduceAlgorithmTest : public ::testing::TestWithParam<Algorithm> {
 protected:
  // Reduce runs one all_reduce of the algorithm on `ring`.
  RankOutcome Reduce(const TestRing& ring, const Fingerprint& tensors,
                     v1::ReduceOp reduce, const std::vector<double>& weights,
                     const std::vector<std::string>& contributions,
                     const std::vector<RingOptions>& options, int absent = -1) {
    return testing::RunReduce(GetParam().over(ring), tensors, reduce, weights,
                              contributions, options, absent);
  }
};

TEST_P(AllReduceAlgorithmTest,
       EveryRankHoldsTheReferenceForEveryOpDtypeAndWorldSize) {
  PeerTestPki pki;
  const std::vector<ReduceCase> cases = ReduceCases();
  for (int world : {1, 2, 3, 4, 8}) {
    TestRing ring = MakeRing(pki, world);
    std::vector<double> weights;
    for (int r = 0; r < world; ++r) weights.push_back(0.5 + r);
    for (size_t c = 0; c < cases.size(); ++c) {
      SCOPED_TRACE(absl::StrCat("N = ", world, ", case ", c));
      std::vector<std::string> contributions;
      for (int r = 0; r < world; ++r) {
        contributions.push_back(Contribution(cases[c].tensors, r, 3 + c));
      }
      std::vector<RingOptions> options(world);
      for (RingOptions& o : options) {
        o.op = c + 1;
        o.chunk_bytes = 1000;  // many chunks, some cut mid-tensor
      }
      const RankOutcome outcome =
          Reduce(ring, cases[c].tensors, cases[c].reduce, weights,
                 contributions, options);
      const std::string expected =
          testing::ReferenceReduce(cases[c].tensors, cases[c].reduce, weights,
                                   contributions, GetParam().order);
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(outcome.status[r].ok()) << outcome.status[r];
        EXPECT_TRUE(outcome.out[r] == expected) << "rank " << r;
      }
    }
  }
}

TEST_P(AllReduceAlgorithmTest, IntegerSumsAndMinMaxEqualPlainArithmetic) {
  PeerTestPki pki;
  constexpr int kWorld = 5;
  TestRing ring = MakeRing(pki, kWorld);
  const Fingerprint tensors = {{"i", DType::kI32, {4099}},
                               {"m", DType::kF32, {2000}}};
  std::vector<std::string> contributions;
  for (int r = 0; r < kWorld; ++r) {
    contributions.push_back(Contribution(tensors, r, 11));
  }
  const std::vector<double> weights(kWorld, 1.0);
  const std::vector<RingOptions> options(kWorld);
  const RankOutcome sum =
      Reduce(ring, tensors, v1::SUM, weights, contributions, options);
  const RankOutcome max =
      Reduce(ring, tensors, v1::MAX, weights, contributions, options);
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(sum.status[r].ok()) << sum.status[r];
    ASSERT_TRUE(max.status[r].ok()) << max.status[r];
  }
  for (int64_t e = 0; e < 4099; ++e) {
    uint32_t wrapped = 0;  // the sum wraps as int32 arithmetic would
    for (int r = 0; r < kWorld; ++r) {
      uint32_t x;
      std::memcpy(&x, contributions[r].data() + 4 * e, 4);
      wrapped += x;
    }
    uint32_t got;
    std::memcpy(&got, sum.out[2].data() + 4 * e, 4);
    ASSERT_EQ(got, wrapped) << "element " << e;
  }
  for (int64_t e = 0; e < 2000; ++e) {
    const size_t at = 4 * 4099 + 4 * e;
    float most = -1e30f;
    for (int r = 0; r < kWorld; ++r) {
      float x;
      std::memcpy(&x, contributions[r].data() + at, 4);
      most = std::max(most, x);
    }
    float got;
    std::memcpy(&got, max.out[4].data() + at, 4);
    ASSERT_EQ(got, most) << "element " << e;
  }
}

TEST_P(AllReduceAlgorithmTest,
       AMemberThatStopsFailsEveryOtherRankWithinTheStallTimeout) {
  PeerTestPki pki;
  constexpr int kWorld = 4;
  TestRing ring = MakeRing(pki, kWorld);
  const Fingerprint tensors = {{"w", DType::kF32, {1 << 20}}};
  std::vector<std::string> contributions;
  for (int r = 0; r < kWorld; ++r) {
    contributions.push_back(Contribution(tensors, r, 6));
  }
  std::vector<RingOptions> options(kWorld);
  for (RingOptions& o : options) o.stall_timeout = absl::Milliseconds(500);
  const absl::Time start = absl::Now();
  const RankOutcome outcome =
      Reduce(ring, tensors, v1::SUM, std::vector<double>(kWorld, 1.0),
             contributions, options, /*absent=*/2);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (int r : {0, 1, 3}) EXPECT_FALSE(outcome.status[r].ok()) << "rank " << r;
  EXPECT_EQ(outcome.status[3].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(outcome.status[3].message(),
              ::testing::HasSubstr("rank 2 ('site-2')"));
}

INSTANTIATE_TEST_SUITE_P(
    RingAndLogSteps, AllReduceAlgorithmTest,
    ::testing::Values(Algorithm{"Ring", &testing::RingReduceOver,
                                &testing::RingFoldOrder},
                      Algorithm{"LogSteps", &testing::GatherReduceOver,
                                &testing::RankFoldOrder}),
    [](const ::testing::TestParamInfo<Algorithm>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace fedgather
