#include "server/relay/reducer.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fedgather::server {
namespace {

using ::testing::HasSubstr;

template <typename T>
std::vector<T> As(const std::string& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

template <typename T>
const uint8_t* Bytes(const std::vector<T>& v) {
  return reinterpret_cast<const uint8_t*>(v.data());
}

constexpr int64_t kMaxResult = 1 << 20;

std::unique_ptr<Reducer> Make(v1::ReduceOp op, DType dtype, int world,
                              int64_t elements = 4) {
  auto reducer =
      Reducer::Create(op, {{"t", dtype, {elements}}}, world, kMaxResult);
  EXPECT_TRUE(reducer.ok()) << reducer.status();
  return *std::move(reducer);
}

// Finished returns the bytes of the result chunks an Add finished, in order
// (checking that they are contiguous), or nullopt when it finished none.
std::optional<std::string> Finished(absl::StatusOr<Reducer::Added> added) {
  EXPECT_TRUE(added.ok()) << added.status();
  if (!added.ok() || added->finished.empty()) return std::nullopt;
  std::string bytes;
  int64_t next = added->finished.front().offset;
  for (const Reducer::FinishedChunk& chunk : added->finished) {
    EXPECT_EQ(chunk.offset, next);
    next += static_cast<int64_t>(chunk.data.size());
    bytes += chunk.data;
  }
  return bytes;
}

TEST(ReducerTest, FloatOpsOverThreeRanksInAnyArrivalOrder) {
  const std::vector<std::vector<float>> in = {
      {1, -2, 3.5f, 0}, {4, 5, -6, 0.25f}, {-7, 8, 9, 10}};
  const std::vector<double> weights = {1, 2, 5};
  struct Case {
    v1::ReduceOp op;
    std::vector<float> want;
  };
  const Case cases[] = {
      {v1::SUM, {-2, 11, 6.5f, 10.25f}},
      {v1::MEAN, {-2.0f / 3, 11.0f / 3, 6.5f / 3, 10.25f / 3}},
      {v1::MIN, {-7, -2, -6, 0}},
      {v1::MAX, {4, 8, 9, 10}},
      {v1::WEIGHTED_MEAN,
       {(1 + 8 - 35) / 8.0f, (-2 + 10 + 40) / 8.0f, (3.5f - 12 + 45) / 8.0f,
        (0 + 0.5f + 50) / 8.0f}},
  };
  for (const Case& c : cases) {
    for (const std::vector<int>& order :
         {std::vector<int>{0, 1, 2}, std::vector<int>{2, 0, 1}}) {
      auto reducer = Make(c.op, DType::kF32, 3);
      std::optional<std::string> done;
      for (size_t k = 0; k < order.size(); ++k) {
        const int r = order[k];
        EXPECT_FALSE(done.has_value());
        done = Finished(reducer->Add(r, weights[r], 0, 0, Bytes(in[r]), 16));
        if (k + 1 < order.size()) {
          EXPECT_GT(reducer->HeldBytes(), 0);
        }
      }
      ASSERT_TRUE(done.has_value()) << ReduceOpName(c.op);
      const std::vector<float> got = As<float>(*done);
      for (int i = 0; i < 4; ++i) {
        EXPECT_NEAR(got[i], c.want[i], 1e-6) << ReduceOpName(c.op) << " " << i;
      }
      EXPECT_EQ(reducer->HeldBytes(), 0);
    }
  }
}

TEST(ReducerTest, IntegersAreExactAndSumsWrapLikeTheType) {
  auto sum = Make(v1::SUM, DType::kI32, 2, 2);
  const std::vector<int32_t> a = {INT32_MAX, -5};
  const std::vector<int32_t> b = {1, 3};
  EXPECT_FALSE(Finished(sum->Add(0, 1, 0, 0, Bytes(a), 8)).has_value());
  const std::vector<int32_t> got =
      As<int32_t>(*Finished(sum->Add(1, 1, 0, 0, Bytes(b), 8)));
  EXPECT_EQ(got, (std::vector<int32_t>{INT32_MIN, -2}));

  auto big = Make(v1::SUM, DType::kI64, 2, 1);
  const std::vector<int64_t> x = {(int64_t{1} << 62) + 1};
  ASSERT_FALSE(Finished(big->Add(0, 1, 0, 0, Bytes(x), 8)).has_value());
  // (2^62 + 1) * 2 = 2^63 + 2 wraps to INT64_MIN + 2.
  EXPECT_EQ(As<int64_t>(*Finished(big->Add(1, 1, 0, 0, Bytes(x), 8)))[0],
            INT64_MIN + 2);
  auto low = Make(v1::MIN, DType::kU8, 2, 3);
  const std::vector<uint8_t> p = {0, 200, 7}, q = {255, 100, 7};
  ASSERT_FALSE(Finished(low->Add(0, 1, 0, 0, p.data(), 3)).has_value());
  EXPECT_EQ(As<uint8_t>(*Finished(low->Add(1, 1, 0, 0, q.data(), 3))),
            (std::vector<uint8_t>{0, 100, 7}));
}

TEST(ReducerTest, HalfAndBfloatRoundTripEveryBitPattern) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    std::vector<uint16_t> all(65536);
    for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
    auto one = Reducer::Create(v1::SUM, {{"t", dtype, {65536}}}, 1, 1 << 20);
    ASSERT_TRUE(one.ok());
    const std::vector<uint16_t> back =
        As<uint16_t>(*Finished((*one)->Add(0, 1, 0, 0, Bytes(all), 2 * 65536)));
    int nans = 0;
    for (int i = 0; i < 65536; ++i) {
      const bool nan = dtype == DType::kF16
                           ? (i & 0x7c00) == 0x7c00 && (i & 0x3ff) != 0
                           : (i & 0x7f80) == 0x7f80 && (i & 0x7f) != 0;
      if (nan) {
        ++nans;
        continue;  // stays NaN, possibly quieted
      }
      ASSERT_EQ(back[i], all[i]) << DTypeName(dtype) << " pattern " << i;
    }
    EXPECT_GT(nans, 0);
  }
}

TEST(ReducerTest, HalfMeanRoundsToNearestEven) {
  // 1.0 and 1 + 2^-10 (the next half): their mean lies halfway between and
  // rounds to the even one, 1.0; 1 + 2^-10 and 1 + 2^-9 round up to 1 + 2^-9.
  auto mean = Make(v1::MEAN, DType::kF16, 2, 2);
  const std::vector<uint16_t> a = {0x3c00, 0x3c01}, b = {0x3c01, 0x3c02};
  ASSERT_FALSE(Finished(mean->Add(0, 1, 0, 0, Bytes(a), 4)).has_value());
  EXPECT_EQ(As<uint16_t>(*Finished(mean->Add(1, 1, 0, 0, Bytes(b), 4))),
            (std::vector<uint16_t>{0x3c00, 0x3c02}));
}

TEST(ReducerTest, ResultChunksHoldAtMostTheLimitAndMemoryIsReleased) {
  // Result chunks of at most 16 bytes: two F64 elements.
  auto created =
      Reducer::Create(v1::SUM, {{"t", DType::kF64, {4}}}, 2, /*max=*/16);
  ASSERT_TRUE(created.ok());
  Reducer& sum = **created;
  const std::vector<double> x = {1, 2}, y = {10, 20};
  // Rank 0 is two chunks ahead of rank 1.
  absl::StatusOr<Reducer::Added> added = sum.Add(0, 1, 0, 0, Bytes(x), 16);
  ASSERT_TRUE(added.ok());
  EXPECT_TRUE(added->ahead);
  EXPECT_TRUE(added->finished.empty());
  EXPECT_FALSE(Finished(sum.Add(0, 1, 0, 16, Bytes(y), 16)).has_value());
  EXPECT_EQ(sum.HeldBytes(), 32);
  added = sum.Add(1, 1, 0, 0, Bytes(x), 16);
  ASSERT_TRUE(added.ok());
  EXPECT_FALSE(added->ahead);  // it only caught up
  ASSERT_EQ(added->finished.size(), 1u);
  EXPECT_EQ(added->finished[0].offset, 0);
  EXPECT_EQ(As<double>(added->finished[0].data), (std::vector<double>{2, 4}));
  EXPECT_EQ(As<double>(*Finished(sum.Add(1, 1, 0, 16, Bytes(y), 16))),
            (std::vector<double>{20, 40}));
  EXPECT_EQ(sum.HeldBytes(), 0);
}

// Rank r's value for element i: a small integer, so every sum is exact in
// fp32 whatever the order of folding.
float Value(int r, int64_t i) {
  return static_cast<float>((i * 7 + r * 3) % 50);
}

// Feeds each rank's F32 contribution cut at its own chunk size, interleaving
// the ranks' chunks in a random order, and returns the result bytes.
std::string ReduceCut(const std::vector<int64_t>& cuts, int64_t elements,
                      uint32_t seed, int64_t max_result) {
  const int world = static_cast<int>(cuts.size());
  auto created = Reducer::Create(v1::SUM, {{"w", DType::kF32, {elements}}},
                                 world, max_result);
  EXPECT_TRUE(created.ok());
  Reducer& reducer = **created;
  std::vector<std::vector<float>> in(world, std::vector<float>(elements));
  for (int r = 0; r < world; ++r) {
    for (int64_t i = 0; i < elements; ++i) in[r][i] = Value(r, i);
  }
  const int64_t bytes = elements * 4;
  std::vector<int64_t> sent(world, 0);
  std::mt19937 random(seed);
  std::string result;
  for (int left = world; left > 0;) {
    const int r = static_cast<int>(random() % world);
    if (sent[r] == bytes) continue;
    const int64_t size = std::min(cuts[r], bytes - sent[r]);
    absl::StatusOr<Reducer::Added> added =
        reducer.Add(r, 1, 0, sent[r], Bytes(in[r]) + sent[r], size);
    EXPECT_TRUE(added.ok()) << added.status();
    if (!added.ok()) return "";
    for (const Reducer::FinishedChunk& chunk : added->finished) {
      EXPECT_EQ(chunk.offset, static_cast<int64_t>(result.size()));
      EXPECT_LE(static_cast<int64_t>(chunk.data.size()), max_result);
      EXPECT_EQ(chunk.data.size() % 4, 0u) << "a result chunk cut an element";
      result += chunk.data;
    }
    sent[r] += size;
    if (sent[r] == bytes) --left;
  }
  EXPECT_EQ(reducer.HeldBytes(), 0);
  return result;
}

std::string ExpectedSum(int world, int64_t elements) {
  std::vector<float> sum(elements, 0);
  for (int r = 0; r < world; ++r) {
    for (int64_t i = 0; i < elements; ++i) sum[i] += Value(r, i);
  }
  return std::string(reinterpret_cast<const char*>(sum.data()), sum.size() * 4);
}

// Issue 17, finding 1: each rank may cut its chunks as it likes; the
// reduction goes by element range and the result is the same byte for byte.
TEST(ReducerTest, EveryRankMayCutItsChunksDifferently) {
  const int64_t elements = 300000;  // 1.2 MB: several blocks and results
  const std::string want = ExpectedSum(4, elements);
  for (const std::vector<int64_t>& cuts :
       {std::vector<int64_t>{1 << 20, 4096, 1000, 24},
        std::vector<int64_t>{4096, 4096, 4096, 8192},
        std::vector<int64_t>{1, 1 << 20, 3, 65537}}) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      const int64_t cut_elements = cuts[0] == 1 ? 3000 : elements;
      const std::string got = ReduceCut(cuts, cut_elements, seed, 1 << 20);
      const std::string expected =
          cuts[0] == 1 ? ExpectedSum(4, cut_elements) : want;
      ASSERT_EQ(got.size(), expected.size()) << cuts[1] << " seed " << seed;
      EXPECT_TRUE(got == expected)
          << "cuts " << cuts[0] << "/" << cuts[1] << "/" << cuts[2] << "/"
          << cuts[3] << " seed " << seed;
    }
  }
}

// Issue 17, finding 2: chunks that end inside an element lose nothing, and
// the result chunks are cut on element boundaries.
TEST(ReducerTest, ChunksEndingInsideAnElementLoseNoBytes) {
  const std::string got = ReduceCut({1001, 1001}, 4096, 7, 1 << 20);
  EXPECT_EQ(got.size(), 16384u);
  EXPECT_TRUE(got == ExpectedSum(2, 4096));
  // With a small result limit that is not a multiple of the element size.
  const std::string small = ReduceCut({1001, 999, 4}, 4096, 8, 1001);
  EXPECT_TRUE(small == ExpectedSum(3, 4096));
}

TEST(ReducerTest, TensorsOfEveryDtypeWithEmptyOnesBetween) {
  const Fingerprint fingerprint = {{"h", DType::kF16, {5}},
                                   {"none", DType::kF32, {0}},
                                   {"i", DType::kI32, {3}},
                                   {"d", DType::kF64, {2}}};
  auto created = Reducer::Create(v1::MAX, fingerprint, 2, kMaxResult);
  ASSERT_TRUE(created.ok());
  Reducer& max = **created;
  // F16 1.0 = 0x3c00, 2.0 = 0x4000; rank 0 sends 1s, rank 1 sends 2s.
  const std::vector<uint16_t> h0(5, 0x3c00), h1(5, 0x4000);
  const std::vector<int32_t> i0 = {-1, 5, 7}, i1 = {3, -5, 7};
  const std::vector<double> d0 = {0.5, -1}, d1 = {-0.5, 1};
  // Rank 0 cuts at 3 bytes (inside elements), rank 1 sends each tensor whole.
  std::string h_result, i_result, d_result;
  const auto take = [&](absl::StatusOr<Reducer::Added> added) {
    ASSERT_TRUE(added.ok()) << added.status();
    for (const Reducer::FinishedChunk& chunk : added->finished) {
      std::string& to = chunk.tensor == 0   ? h_result
                        : chunk.tensor == 2 ? i_result
                                            : d_result;
      EXPECT_EQ(chunk.offset, static_cast<int64_t>(to.size()));
      to += chunk.data;
    }
  };
  const auto send_cut = [&](int tensor, const uint8_t* data, int64_t bytes) {
    for (int64_t at = 0; at < bytes; at += 3) {
      take(max.Add(0, 1, tensor, at, data + at,
                   std::min<int64_t>(3, bytes - at)));
    }
  };
  send_cut(0, Bytes(h0), 10);
  take(max.Add(1, 1, 0, 0, Bytes(h1), 10));
  take(max.Add(1, 1, 2, 0, Bytes(i1), 12));  // tensor 1 is empty: skipped
  send_cut(2, Bytes(i0), 12);
  send_cut(3, Bytes(d0), 16);
  take(max.Add(1, 1, 3, 0, Bytes(d1), 16));
  EXPECT_EQ(As<uint16_t>(h_result), h1);
  EXPECT_EQ(As<int32_t>(i_result), (std::vector<int32_t>{3, 5, 7}));
  EXPECT_EQ(As<double>(d_result), (std::vector<double>{0.5, 1}));
  EXPECT_EQ(max.HeldBytes(), 0);
}

TEST(ReducerTest,
     AChunkThatIsNotTheRanksNextIsAnInternalErrorAndChangesNothing) {
  auto sum = Make(v1::SUM, DType::kF32, 2, 4);
  const std::vector<float> x = {1, 2, 3, 4};
  ASSERT_TRUE(sum->Add(0, 1, 0, 0, Bytes(x), 8).ok());
  for (const auto& [tensor, offset, size] :
       {std::tuple<int, int64_t, int64_t>{0, 0, 8},  // again
        {0, 12, 4},                                  // a gap
        {0, 8, 12},                                  // past the end
        {1, 0, 4},                                   // no such tensor
        {0, 8, 0}}) {                                // empty
    const absl::Status refused =
        sum->Add(0, 1, tensor, offset, Bytes(x), size).status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kInternal)
        << tensor << " " << offset << " " << size;
  }
  EXPECT_FALSE(sum->Add(7, 1, 0, 0, Bytes(x), 4).ok());
  ASSERT_FALSE(Finished(sum->Add(0, 1, 0, 8, Bytes(x) + 8, 8)).has_value());
  EXPECT_EQ(As<float>(*Finished(sum->Add(1, 1, 0, 0, Bytes(x), 16))),
            (std::vector<float>{2, 4, 6, 8}));
}

TEST(ReducerTest, AQuorumFinishesWithItsContributorsOnly) {
  auto created = Reducer::Create(v1::WEIGHTED_MEAN, {{"t", DType::kF32, {3}}},
                                 3, kMaxResult);
  ASSERT_TRUE(created.ok());
  Reducer& mean = **created;
  const std::vector<float> a = {1, 2, 3}, b = {4, 5, 6};
  ASSERT_FALSE(Finished(mean.Add(0, 1, 0, 0, Bytes(a), 12)).has_value());
  ASSERT_FALSE(Finished(mean.Add(2, 3, 0, 0, Bytes(b), 5)).has_value());
  // Rank 1 never started: the round closes to ranks 0 and 2, whose rank 2
  // has sent only part of its contribution.
  EXPECT_TRUE(mean.CloseContributors({true, false, true}).empty());
  const std::vector<float> got =
      As<float>(*Finished(mean.Add(2, 3, 0, 5, Bytes(b) + 5, 7)));
  EXPECT_EQ(got, (std::vector<float>{(1 + 12) / 4.0f, (2 + 15) / 4.0f,
                                     (3 + 18) / 4.0f}));
  EXPECT_EQ(mean.HeldBytes(), 0);
}

TEST(ReducerTest, RefusesWhatItCannotReduce) {
  const absl::Status boolean =
      Reducer::Create(v1::MAX, {{"mask", DType::kBool, {2}}}, 2, kMaxResult)
          .status();
  EXPECT_EQ(boolean.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(boolean.message()), HasSubstr("'mask' is BOOL"));
  const absl::Status mean =
      Reducer::Create(v1::MEAN, {{"n", DType::kI64, {2}}}, 2, kMaxResult)
          .status();
  EXPECT_THAT(std::string(mean.message()),
              HasSubstr("MEAN needs floating tensors, but tensor 'n' is I64"));
  EXPECT_FALSE(Reducer::Create(v1::REDUCE_UNSPECIFIED,
                               {{"x", DType::kF32, {2}}}, 2, kMaxResult)
                   .ok());
}

}  // namespace
}  // namespace fedgather::server
