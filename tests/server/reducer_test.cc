#include "server/reducer.h"

#include <cmath>
#include <cstring>
#include <string>
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

std::unique_ptr<Reducer> Make(v1::ReduceOp op, DType dtype, int world,
                              int64_t elements = 4) {
  auto reducer = Reducer::Create(op, {{"t", dtype, {elements}}}, world);
  EXPECT_TRUE(reducer.ok()) << reducer.status();
  return *std::move(reducer);
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
        done = reducer->Add(r, weights[r], 0, 0, Bytes(in[r]), 16);
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
  EXPECT_FALSE(sum->Add(0, 1, 0, 0, Bytes(a), 8).has_value());
  const std::vector<int32_t> got =
      As<int32_t>(*sum->Add(1, 1, 0, 0, Bytes(b), 8));
  EXPECT_EQ(got, (std::vector<int32_t>{INT32_MIN, -2}));

  auto big = Make(v1::SUM, DType::kI64, 2, 1);
  const std::vector<int64_t> x = {(int64_t{1} << 62) + 1};
  ASSERT_FALSE(big->Add(0, 1, 0, 0, Bytes(x), 8).has_value());
  // (2^62 + 1) * 2 = 2^63 + 2 wraps to INT64_MIN + 2.
  EXPECT_EQ(As<int64_t>(*big->Add(1, 1, 0, 0, Bytes(x), 8))[0], INT64_MIN + 2);
  auto low = Make(v1::MIN, DType::kU8, 2, 3);
  const std::vector<uint8_t> p = {0, 200, 7}, q = {255, 100, 7};
  ASSERT_FALSE(low->Add(0, 1, 0, 0, p.data(), 3).has_value());
  EXPECT_EQ(As<uint8_t>(*low->Add(1, 1, 0, 0, q.data(), 3)),
            (std::vector<uint8_t>{0, 100, 7}));
}

TEST(ReducerTest, HalfAndBfloatRoundTripEveryBitPattern) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    std::vector<uint16_t> all(65536);
    for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
    auto one = Reducer::Create(v1::SUM, {{"t", dtype, {65536}}}, 1);
    ASSERT_TRUE(one.ok());
    const std::vector<uint16_t> back =
        As<uint16_t>(*(*one)->Add(0, 1, 0, 0, Bytes(all), 2 * 65536));
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
  ASSERT_FALSE(mean->Add(0, 1, 0, 0, Bytes(a), 4).has_value());
  EXPECT_EQ(As<uint16_t>(*mean->Add(1, 1, 0, 0, Bytes(b), 4)),
            (std::vector<uint16_t>{0x3c00, 0x3c02}));
}

TEST(ReducerTest, ChunksAreIndependentAndMemoryIsReleased) {
  auto sum = Make(v1::SUM, DType::kF64, 2, 4);
  const std::vector<double> x = {1, 2}, y = {10, 20};
  // Rank 0 is two chunks ahead of rank 1.
  EXPECT_FALSE(sum->Add(0, 1, 0, 0, Bytes(x), 16).has_value());
  EXPECT_FALSE(sum->Add(0, 1, 0, 16, Bytes(y), 16).has_value());
  EXPECT_EQ(sum->HeldBytes(), 32);
  EXPECT_EQ(As<double>(*sum->Add(1, 1, 0, 0, Bytes(x), 16)),
            (std::vector<double>{2, 4}));
  EXPECT_EQ(sum->HeldBytes(), 16);
  EXPECT_EQ(As<double>(*sum->Add(1, 1, 0, 16, Bytes(y), 16)),
            (std::vector<double>{20, 40}));
  EXPECT_EQ(sum->HeldBytes(), 0);
}

TEST(ReducerTest, RefusesWhatItCannotReduce) {
  const absl::Status boolean =
      Reducer::Create(v1::MAX, {{"mask", DType::kBool, {2}}}, 2).status();
  EXPECT_EQ(boolean.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(boolean.message()), HasSubstr("'mask' is BOOL"));
  const absl::Status mean =
      Reducer::Create(v1::MEAN, {{"n", DType::kI64, {2}}}, 2).status();
  EXPECT_THAT(std::string(mean.message()),
              HasSubstr("MEAN needs floating tensors, but tensor 'n' is I64"));
  EXPECT_FALSE(
      Reducer::Create(v1::REDUCE_UNSPECIFIED, {{"x", DType::kF32, {2}}}, 2)
          .ok());
}

}  // namespace
}  // namespace fedgather::server
