// The ring all_reduce over real mutual-TLS peer links on 127.0.0.1: every
// rank ends with the same bytes, equal to a reference folded in the
// documented order (client/peer/ring_all_reduce.h) for every op, dtype and
// world size; integer sums and MIN/MAX equal plain arithmetic; a tampering
// forwarder makes the ranks' results differ; a silent member fails the
// others within the stall timeout.
#include "client/peer/ring_all_reduce.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/element_reduction.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/peer/peer_test_pki.h"

namespace fedgather {
namespace {

using testing::MakeRing;
using testing::PeerTestPki;
using testing::TestRing;

int64_t Elements(const TensorSpec& spec) {
  return NumElements(spec.shape).value();
}

// Rank r's contribution: random elements, finite for the floating dtypes.
std::string Contribution(const Fingerprint& tensors, int rank, uint32_t seed) {
  std::mt19937 random(seed * 1000 + rank);
  std::string bytes;
  for (const TensorSpec& spec : tensors) {
    for (int64_t e = 0; e < Elements(spec); ++e) {
      uint64_t bits = random() | (uint64_t{random()} << 32);
      switch (spec.dtype) {
        case DType::kF32: {
          const float f = std::uniform_real_distribution<float>(-2, 2)(random);
          std::memcpy(&bits, &f, 4);
          break;
        }
        case DType::kF64: {
          const double d =
              std::uniform_real_distribution<double>(-2, 2)(random);
          std::memcpy(&bits, &d, 8);
          break;
        }
        case DType::kF16:  // exponent 1..29: a normal, modest number
          bits = (bits & 0x83ff) | ((1 + bits % 29) << 10);
          break;
        case DType::kBF16:  // exponent 100..139
          bits = (bits & 0x807f) | ((100 + bits % 40) << 7);
          break;
        default:
          break;
      }
      bytes.append(reinterpret_cast<const char*>(&bits), DTypeSize(spec.dtype));
    }
  }
  return bytes;
}

// Reference folds every element in the documented order: element e of E
// lies in segment s = the one with ⌊E·s/N⌋ <= e < ⌊E·(s+1)/N⌋, which ranks
// s+1, s+2, …, s (mod N) fold in turn.
std::string Reference(const Fingerprint& tensors, v1::ReduceOp reduce,
                      const std::vector<double>& weights,
                      const std::vector<std::string>& contributions) {
  const int world = static_cast<int>(weights.size());
  int64_t total = 0;
  for (const TensorSpec& spec : tensors) total += Elements(spec);
  double total_weight = 0;
  for (double w : weights) total_weight += w;
  std::string out(contributions[0].size(), '\0');
  int64_t global = 0;
  size_t offset = 0;
  for (const TensorSpec& spec : tensors) {
    const size_t size = DTypeSize(spec.dtype);
    for (int64_t e = 0; e < Elements(spec); ++e, ++global, offset += size) {
      int segment = 0;
      while (static_cast<int64_t>(static_cast<__int128>(total) * (segment + 1) /
                                  world) <= global) {
        ++segment;
      }
      alignas(8) uint8_t accumulator[8];
      for (int i = 1; i <= world; ++i) {
        const int r = (segment + i) % world;
        FoldIntoAccumulators(
            reduce, spec.dtype, i == 1, weights[r],
            reinterpret_cast<const uint8_t*>(contributions[r].data()) + offset,
            1, accumulator);
      }
      ConvertAccumulators(reduce, spec.dtype, accumulator, 1, world,
                          total_weight,
                          reinterpret_cast<uint8_t*>(out.data()) + offset);
    }
  }
  return out;
}

struct Outcome {
  std::vector<absl::Status> status;
  std::vector<std::string> out;
};

Outcome Reduce(TestRing& ring, const Fingerprint& tensors, v1::ReduceOp reduce,
               const std::vector<double>& weights,
               const std::vector<std::string>& contributions,
               const std::vector<RingOptions>& options, int absent = -1) {
  const int world = static_cast<int>(weights.size());
  Outcome outcome{std::vector<absl::Status>(world),
                  std::vector<std::string>(
                      world, std::string(contributions[0].size(), '?'))};
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    if (r == absent) continue;
    ranks.emplace_back([&, r] {
      std::vector<char> accumulators;
      outcome.status[r] =
          RingAllReduce(r, tensors, reduce, weights, contributions[r].data(),
                        outcome.out[r].data(), ring.to_next[r].get(),
                        ring.from_prev[r].get(), options[r], &accumulators);
    });
  }
  for (std::thread& t : ranks) t.join();
  return outcome;
}

TEST(RingAllReduce, EveryRankHoldsTheReferenceForEveryOpDtypeAndWorldSize) {
  PeerTestPki pki;
  const Fingerprint mixed = {
      {"a", DType::kF32, {300, 3}}, {"b", DType::kF16, {777}},
      {"c", DType::kI32, {5}},      {"d", DType::kBF16, {0}},
      {"e", DType::kF64, {3}},      {"f", DType::kI8, {64}},
      {"g", DType::kBF16, {129}}};
  const Fingerprint floating = {{"a", DType::kF32, {1000}},
                                {"b", DType::kBF16, {333}},
                                {"c", DType::kF64, {17}},
                                {"d", DType::kF16, {2}}};
  const Fingerprint tiny = {{"x", DType::kF32, {2}}};  // fewer than N
  struct Case {
    const Fingerprint* tensors;
    v1::ReduceOp reduce;
  };
  const std::vector<Case> cases = {{&mixed, v1::SUM},
                                   {&mixed, v1::MIN},
                                   {&mixed, v1::MAX},
                                   {&floating, v1::MEAN},
                                   {&floating, v1::WEIGHTED_MEAN},
                                   {&tiny, v1::SUM}};
  for (int world : {1, 2, 3, 4, 8}) {
    TestRing ring = MakeRing(pki, world);
    std::vector<double> weights;
    for (int r = 0; r < world; ++r) weights.push_back(0.5 + r);
    for (size_t c = 0; c < cases.size(); ++c) {
      SCOPED_TRACE(absl::StrCat("N = ", world, ", case ", c));
      std::vector<std::string> contributions;
      for (int r = 0; r < world; ++r) {
        contributions.push_back(Contribution(*cases[c].tensors, r, 3 + c));
      }
      std::vector<RingOptions> options(world);
      for (RingOptions& o : options) {
        o.op = c + 1;
        o.chunk_bytes = 1000;  // many runs per segment, some cut mid-tensor
      }
      const Outcome outcome = Reduce(ring, *cases[c].tensors, cases[c].reduce,
                                     weights, contributions, options);
      const std::string expected =
          Reference(*cases[c].tensors, cases[c].reduce, weights, contributions);
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(outcome.status[r].ok()) << outcome.status[r];
        EXPECT_TRUE(outcome.out[r] == expected) << "rank " << r;
      }
    }
  }
}

TEST(RingAllReduce, IntegerSumsAndMinMaxEqualPlainArithmetic) {
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
  const Outcome sum =
      Reduce(ring, tensors, v1::SUM, weights, contributions, options);
  const Outcome max =
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

TEST(RingAllReduce, AForwarderThatChangesBytesMakesTheRanksResultsDiffer) {
  PeerTestPki pki;
  constexpr int kWorld = 3;
  TestRing ring = MakeRing(pki, kWorld);
  const Fingerprint tensors = {{"w", DType::kF32, {30000}}};
  std::vector<std::string> contributions;
  for (int r = 0; r < kWorld; ++r) {
    contributions.push_back(Contribution(tensors, r, 5));
  }
  std::vector<RingOptions> options(kWorld);
  // Rank 1 flips a bit of everything it forwards: in the reduce-scatter a
  // partial sum (every rank then agrees on a wrong segment), in the
  // all_gather a reduced segment, which only the ranks after it receive.
  options[1].forward_hook = [](int, char* data, size_t) { data[0] ^= 1; };
  const Outcome outcome =
      Reduce(ring, tensors, v1::SUM, std::vector<double>(kWorld, 1.0),
             contributions, options);
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(outcome.status[r].ok()) << outcome.status[r];
  }
  EXPECT_FALSE(outcome.out[0] == outcome.out[1] &&
               outcome.out[1] == outcome.out[2]);
}

TEST(RingAllReduce, AMemberThatStopsFailsEveryOtherRankWithinTheStallTimeout) {
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
  const Outcome outcome =
      Reduce(ring, tensors, v1::SUM, std::vector<double>(kWorld, 1.0),
             contributions, options, /*absent=*/2);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (int r : {0, 1, 3}) EXPECT_FALSE(outcome.status[r].ok()) << "rank " << r;
  EXPECT_EQ(outcome.status[3].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(outcome.status[3].message(),
              ::testing::HasSubstr("rank 2 ('site-2')"));
}

}  // namespace
}  // namespace fedgather
