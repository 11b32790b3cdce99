#include "common/tensor_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace fedgather {
namespace {

using ::testing::HasSubstr;

TEST(TensorSpecTest, NumElementsOfNormalEmptyAndScalarShapes) {
  EXPECT_EQ(NumElements({2, 3, 4}).value(), 24);
  EXPECT_EQ(NumElements({7}).value(), 7);
  EXPECT_EQ(NumElements({3, 0, 5}).value(), 0);
  EXPECT_EQ(NumElements({}).value(), 1);  // A scalar has one element.
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(NumElements({max}).value(), max);
  EXPECT_EQ(NumElements({max, 1}).value(), max);
  // A zero dimension makes any product valid, even after a huge one.
  EXPECT_EQ(NumElements({max, 0, max}).value(), 0);
}

TEST(TensorSpecTest, NumElementsRejectsNegativeAndOverflowingShapes) {
  const absl::Status negative = NumElements({2, -1}).status();
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(negative.message()), HasSubstr("negative"));
  EXPECT_THAT(std::string(negative.message()), HasSubstr("[2, -1]"));

  const absl::Status overflow =
      NumElements({int64_t{1} << 40, int64_t{1} << 40}).status();
  EXPECT_EQ(overflow.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(overflow.message()), HasSubstr("overflows"));
  EXPECT_EQ(NumElements({int64_t{1} << 31, int64_t{1} << 32}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NumElements({int64_t{1} << 31, int64_t{1} << 31}).value(),
            int64_t{1} << 62);
}

TEST(TensorSpecTest, ByteSizeOfNormalEmptyAndScalarTensors) {
  EXPECT_EQ(ByteSize({"w", DType::kF32, {2, 3}}).value(), 24);
  EXPECT_EQ(ByteSize({"w", DType::kBF16, {0, 7}}).value(), 0);
  EXPECT_EQ(ByteSize({"s", DType::kF64, {}}).value(), 8);
  EXPECT_EQ(ByteSize({"b", DType::kBool, {5}}).value(), 5);
  EXPECT_EQ(ByteSize({"h", DType::kF16, {3, 1}}).value(), 6);
  EXPECT_EQ(ByteSize({"i", DType::kI64, {2}}).value(), 16);
}

TEST(TensorSpecTest, InvalidShapesAreInvalidArgumentNamingTheTensor) {
  const absl::Status negative =
      ByteSize({"neg", DType::kF32, {2, -1}}).status();
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(negative.message()), HasSubstr("'neg'"));
  EXPECT_THAT(std::string(negative.message()), HasSubstr("negative"));

  const absl::Status numel_overflow =
      ByteSize({"big", DType::kF32, {int64_t{1} << 40, int64_t{1} << 40}})
          .status();
  EXPECT_EQ(numel_overflow.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(numel_overflow.message()), HasSubstr("'big'"));

  // The element count fits in int64 but the byte count does not.
  const absl::Status bytes_overflow =
      ByteSize({"wide", DType::kI64, {int64_t{1} << 61}}).status();
  EXPECT_EQ(bytes_overflow.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bytes_overflow.message()), HasSubstr("'wide'"));
  EXPECT_THAT(std::string(bytes_overflow.message()), HasSubstr("too large"));
  EXPECT_EQ(ByteSize({"fits", DType::kI64, {int64_t{1} << 59}}).value(),
            int64_t{1} << 62);

  const absl::Status deep =
      ByteSize(
          {"deep", DType::kU8, std::vector<int64_t>(kMaxTensorRank + 1, 1)})
          .status();
  EXPECT_EQ(deep.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(deep.message()), HasSubstr("'deep'"));
  EXPECT_THAT(std::string(deep.message()), HasSubstr("rank 33"));
  EXPECT_EQ(
      ByteSize({"deep", DType::kU8, std::vector<int64_t>(kMaxTensorRank, 1)})
          .value(),
      1);
}

TEST(TensorSpecTest, DTypeNamesRoundTrip) {
  const std::vector<std::pair<std::string, size_t>> expected = {
      {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F64", 8}, {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U8", 1},  {"BOOL", 1},
  };
  for (int v = 1; v <= 10; ++v) {
    SCOPED_TRACE(v);
    const DType dtype = DTypeFromWire(v).value();
    EXPECT_EQ(static_cast<int>(dtype), v);
    EXPECT_EQ(DTypeName(dtype), expected[v - 1].first);
    EXPECT_EQ(DTypeSize(dtype), expected[v - 1].second);
    EXPECT_EQ(DTypeFromName(DTypeName(dtype)).value(), dtype);
  }
}

TEST(TensorSpecTest, UnknownDTypesAreInvalidArgument) {
  for (const char* name : {"F8", "F8_E4M3", "f32", "", "U16", "F32 "}) {
    SCOPED_TRACE(name);
    const absl::Status status = DTypeFromName(name).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()),
                HasSubstr(absl::StrCat("\"", name, "\"")));
  }
  EXPECT_EQ(DTypeFromWire(0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DTypeFromWire(11).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(DTypeFromWire(-1).ok());
}

TEST(TensorSpecTest, SpecToString) {
  EXPECT_EQ(SpecToString({"w", DType::kF16, {2, 3}}), "w:F16[2, 3]");
  EXPECT_EQ(SpecToString({"s", DType::kI8, {}}), "s:I8[]");
  EXPECT_EQ(SpecToString({"e", DType::kBool, {0}}), "e:BOOL[0]");
  EXPECT_EQ(ShapeToString({4, 1, 2}), "[4, 1, 2]");
}

TEST(TensorSpecTest, SpecEquality) {
  const TensorSpec a{"w", DType::kF32, {2}};
  EXPECT_EQ(a, (TensorSpec{"w", DType::kF32, {2}}));
  EXPECT_NE(a, (TensorSpec{"v", DType::kF32, {2}}));
  EXPECT_NE(a, (TensorSpec{"w", DType::kF16, {2}}));
  EXPECT_NE(a, (TensorSpec{"w", DType::kF32, {2, 1}}));
}

}  // namespace
}  // namespace fedgather
