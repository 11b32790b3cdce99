#include "common/tensor_spec.h"

#include <gtest/gtest.h>

namespace fedgather {
namespace {

TEST(TensorSpecTest, ByteSizeOfNormalEmptyAndScalarTensors) {
  EXPECT_EQ(ByteSize({"w", DType::kF32, {2, 3}}).value(), 24);
  EXPECT_EQ(ByteSize({"w", DType::kBF16, {0, 7}}).value(), 0);
  EXPECT_EQ(ByteSize({"s", DType::kF64, {}}).value(), 8);
  EXPECT_EQ(ByteSize({"b", DType::kBool, {5}}).value(), 5);
}

TEST(TensorSpecTest, InvalidShapesAreInvalidArgumentNamingTheTensor) {
  const absl::Status negative =
      ByteSize({"neg", DType::kF32, {2, -1}}).status();
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(negative.message().find("'neg'"), absl::string_view::npos);
  EXPECT_FALSE(
      ByteSize({"big", DType::kF32, {int64_t{1} << 40, int64_t{1} << 40}})
          .ok());
  EXPECT_FALSE(ByteSize({"big", DType::kI64, {int64_t{1} << 61}}).ok());
  EXPECT_FALSE(ByteSize({"deep", DType::kU8,
                         std::vector<int64_t>(kMaxTensorRank + 1, 1)})
                   .ok());
  EXPECT_TRUE(
      ByteSize({"deep", DType::kU8, std::vector<int64_t>(kMaxTensorRank, 1)})
          .ok());
}

TEST(TensorSpecTest, DTypeNamesRoundTrip) {
  for (int v = 1; v <= 10; ++v) {
    const DType dtype = DTypeFromWire(v).value();
    EXPECT_EQ(DTypeFromName(DTypeName(dtype)).value(), dtype);
  }
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeFromName("F8").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(DTypeFromWire(0).ok());
  EXPECT_FALSE(DTypeFromWire(11).ok());
}

TEST(TensorSpecTest, SpecToString) {
  EXPECT_EQ(SpecToString({"w", DType::kF16, {2, 3}}), "w:F16[2, 3]");
  EXPECT_EQ(SpecToString({"s", DType::kI8, {}}), "s:I8[]");
}

}  // namespace
}  // namespace fedgather
