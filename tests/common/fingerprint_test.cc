#include "common/fingerprint.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fedgather {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Specs = google::protobuf::RepeatedPtrField<v1::TensorSpec>;

v1::TensorSpec Wire(const std::string& name, int dtype,
                    std::vector<int64_t> shape) {
  v1::TensorSpec spec;
  spec.set_name(name);
  spec.set_dtype(static_cast<v1::DType>(dtype));
  for (int64_t dim : shape) spec.add_shape(dim);
  return spec;
}

Specs WireList(std::vector<v1::TensorSpec> specs) {
  Specs out;
  for (v1::TensorSpec& spec : specs) *out.Add() = std::move(spec);
  return out;
}

void ExpectInvalid(const absl::Status& status,
                   const std::vector<std::string>& substrings) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  for (const std::string& s : substrings) {
    EXPECT_THAT(std::string(status.message()), HasSubstr(s));
  }
}

TEST(FingerprintFromProtoTest, ConvertsValidSpecs) {
  const Specs wire =
      WireList({Wire("w", v1::BF16, {2, 3}), Wire("b", v1::I64, {}),
                Wire("e", v1::BOOL, {0})});
  absl::StatusOr<Fingerprint> fingerprint = FingerprintFromProto(wire, "here");
  ASSERT_TRUE(fingerprint.ok()) << fingerprint.status();
  const Fingerprint expected = {
      TensorSpec{"w", DType::kBF16, {2, 3}},
      TensorSpec{"b", DType::kI64, {}},
      TensorSpec{"e", DType::kBool, {0}},
  };
  EXPECT_EQ(*fingerprint, expected);
  EXPECT_EQ(ContributionBytes(*fingerprint).value(), 12 + 8 + 0);

  Specs back;
  FingerprintToProto(*fingerprint, &back);
  ASSERT_EQ(back.size(), wire.size());
  for (int i = 0; i < wire.size(); ++i) {
    EXPECT_EQ(back[i].SerializeAsString(), wire[i].SerializeAsString()) << i;
  }
}

TEST(FingerprintFromProtoTest, RejectsNoTensors) {
  absl::StatusOr<Fingerprint> fingerprint =
      FingerprintFromProto(Specs(), "rank 2 header");
  ExpectInvalid(fingerprint.status(), {"the contribution has no tensors"});
  EXPECT_THAT(std::string(fingerprint.status().message()),
              StartsWith("rank 2 header: "));
}

TEST(FingerprintFromProtoTest, RejectsDuplicateNames) {
  absl::StatusOr<Fingerprint> fingerprint = FingerprintFromProto(
      WireList({Wire("w", v1::F32, {1}), Wire("x", v1::F32, {1}),
                Wire("w", v1::F16, {2})}),
      "where");
  ExpectInvalid(fingerprint.status(),
                {"where: ", "tensor name 'w' appears twice"});
}

TEST(FingerprintFromProtoTest, RejectsEmptyName) {
  ExpectInvalid(
      FingerprintFromProto(WireList({Wire("", v1::F32, {1})}), "where")
          .status(),
      {"where: tensor 0 has an empty or over-long name (0 bytes)"});
}

TEST(FingerprintFromProtoTest, RejectsOverlongName) {
  const std::string name(kMaxTensorNameBytes + 1, 'n');
  ExpectInvalid(
      FingerprintFromProto(WireList({Wire(name, v1::F32, {1})}), "where")
          .status(),
      {"empty or over-long name (1025 bytes)"});
}

TEST(FingerprintFromProtoTest, RejectsBadDtype) {
  ExpectInvalid(FingerprintFromProto(
                    WireList({Wire("w", v1::DTYPE_UNSPECIFIED, {1})}), "where")
                    .status(),
                {"where: tensor 'w'", "unknown dtype enum value 0"});
  ExpectInvalid(
      FingerprintFromProto(WireList({Wire("w", 99, {1})}), "where").status(),
      {"tensor 'w'", "unknown dtype enum value 99"});
}

TEST(FingerprintFromProtoTest, RejectsNegativeDimension) {
  ExpectInvalid(
      FingerprintFromProto(WireList({Wire("w", v1::F32, {2, -1})}), "where")
          .status(),
      {"where: ", "tensor 'w'", "negative dimension in shape [2, -1]"});
}

TEST(FingerprintFromProtoTest, RejectsTooManyTensors) {
  Specs wire;
  for (int i = 0; i <= kMaxTensorsPerContribution; ++i) {
    *wire.Add() = Wire("t" + std::to_string(i), v1::U8, {1});
  }
  ExpectInvalid(FingerprintFromProto(wire, "where").status(),
                {"4097 tensors, above the limit of 4096"});
}

TEST(FingerprintFromProtoTest, RejectsOverflowingContribution) {
  // Each tensor alone fits in int64, their sum does not.
  const int64_t quarter = int64_t{1} << 61;  // 3 * 2^61 bytes each
  ExpectInvalid(
      FingerprintFromProto(WireList({Wire("a", v1::U8, {quarter, 3}),
                                     Wire("b", v1::U8, {quarter, 3})}),
                           "where")
          .status(),
      {"where: ", "overflows int64"});
}

Fingerprint One(std::vector<int64_t> shape, DType dtype = DType::kF32,
                const std::string& name = "w") {
  return {TensorSpec{name, dtype, std::move(shape)}};
}

TEST(CompareFingerprintsTest, AllGatherAcceptsEqual) {
  const Fingerprint a = {TensorSpec{"w", DType::kF32, {2, 3}},
                         TensorSpec{"s", DType::kI32, {}}};
  EXPECT_TRUE(CompareFingerprints(v1::ALL_GATHER, 0, a, 1, a).ok());
}

TEST(CompareFingerprintsTest, AllGatherRejectsDifferentFirstDim) {
  ExpectInvalid(
      CompareFingerprints(v1::ALL_GATHER, 0, One({2, 4}), 1, One({3, 4})),
      {"rank 1 and rank 0 disagree on tensor 'w'", "shape [3, 4] vs [2, 4]",
       "(rank 1 vs rank 0)"});
}

TEST(CompareFingerprintsTest, RejectsDifferentDtypeAndShapeTogether) {
  ExpectInvalid(CompareFingerprints(v1::ALL_GATHER, 2, One({2}), 0,
                                    One({5}, DType::kF16)),
                {"rank 0 and rank 2 disagree on tensor 'w'",
                 "dtype F16 vs F32; shape [5] vs [2]"});
}

TEST(CompareFingerprintsTest, RejectsDifferentCounts) {
  const Fingerprint two = {TensorSpec{"w", DType::kF32, {1}},
                           TensorSpec{"b", DType::kF32, {1}}};
  ExpectInvalid(CompareFingerprints(v1::ALL_GATHER, 0, two, 3, One({1})),
                {"rank 3 and rank 0 contribute different tensor counts",
                 "rank 3 has 1 [w], rank 0 has 2 [w, b]"});
}

TEST(CompareFingerprintsTest, RejectsDifferentNames) {
  ExpectInvalid(CompareFingerprints(v1::ALL_GATHER_V, 0, One({1}), 1,
                                    One({1}, DType::kF32, "v")),
                {"rank 1 and rank 0 differ in the name of tensor 0",
                 "rank 1 has 'v', rank 0 has 'w'"});
}

TEST(CompareFingerprintsTest, AllGatherVAllowsDifferentFirstDim) {
  const Fingerprint a = {TensorSpec{"w", DType::kF32, {2, 3, 4}},
                         TensorSpec{"b", DType::kI8, {7}}};
  const Fingerprint b = {TensorSpec{"w", DType::kF32, {9, 3, 4}},
                         TensorSpec{"b", DType::kI8, {0}}};
  EXPECT_TRUE(CompareFingerprints(v1::ALL_GATHER_V, 0, a, 1, b).ok());
}

TEST(CompareFingerprintsTest, AllGatherVRejectsOtherDims) {
  ExpectInvalid(
      CompareFingerprints(v1::ALL_GATHER_V, 0, One({2, 3}), 1, One({2, 4})),
      {"rank 1 and rank 0 disagree on tensor 'w'", "shape [2, 4] vs [2, 3]"});
  ExpectInvalid(
      CompareFingerprints(v1::ALL_GATHER_V, 0, One({2, 3}), 1, One({2, 3, 1})),
      {"shape [2, 3, 1] vs [2, 3]"});
}

TEST(CompareFingerprintsTest, AllGatherVRejectsDtype) {
  ExpectInvalid(CompareFingerprints(v1::ALL_GATHER_V, 0, One({2}), 1,
                                    One({3}, DType::kF64)),
                {"dtype F64 vs F32"});
}

TEST(CompareFingerprintsTest, AllGatherVRejectsScalars) {
  ExpectInvalid(
      CompareFingerprints(v1::ALL_GATHER_V, 0, One({}), 1, One({})),
      {"ALL_GATHER_V needs tensors of rank >= 1", "'w' is a scalar on rank 0"});
  ExpectInvalid(CompareFingerprints(v1::ALL_GATHER_V, 0, One({2}), 1, One({})),
                {"'w' is a scalar on rank 1"});
  ExpectInvalid(CompareFingerprints(v1::ALL_GATHER_V, 4, One({}), 1, One({3})),
                {"'w' is a scalar on rank 4"});
}

TEST(CompareFingerprintsTest, AllGatherAcceptsScalars) {
  EXPECT_TRUE(CompareFingerprints(v1::ALL_GATHER, 0, One({}), 1, One({})).ok());
}

TEST(CheckFingerprintForOpTest, AllGatherBytesTakesOneRankOneU8Tensor) {
  const Fingerprint bytes = {{"b", DType::kU8, {17}}};
  EXPECT_TRUE(CheckFingerprintForOp(v1::ALL_GATHER_BYTES, bytes, "x").ok());
  EXPECT_TRUE(
      CheckFingerprintForOp(v1::ALL_GATHER_BYTES, {{"b", DType::kU8, {0}}}, "x")
          .ok());
  for (const Fingerprint& bad :
       {Fingerprint{{"b", DType::kI8, {17}}},
        Fingerprint{{"b", DType::kU8, {}}},
        Fingerprint{{"b", DType::kU8, {2, 3}}},
        Fingerprint{{"a", DType::kU8, {1}}, {"b", DType::kU8, {1}}},
        Fingerprint{}}) {
    ExpectInvalid(CheckFingerprintForOp(v1::ALL_GATHER_BYTES, bad, "rank 3"),
                  {"rank 3: ALL_GATHER_BYTES takes exactly one rank-1 U8"});
  }
  // Lengths may differ between ranks; names may not.
  EXPECT_TRUE(CompareFingerprints(v1::ALL_GATHER_BYTES, 0, bytes, 1,
                                  {{"b", DType::kU8, {3}}})
                  .ok());
  ExpectInvalid(CompareFingerprints(v1::ALL_GATHER_BYTES, 0, bytes, 1,
                                    {{"c", DType::kU8, {3}}}),
                {"differ in the name of tensor 0"});
}

// Issue 18: an ALL_GATHER_BYTES header of 4096 names of 1 KiB each made a
// 4.2 MB message, which the server kept per failed round.
TEST(CheckFingerprintForOpTest, MessagesListABoundedFewOfManyLongNames) {
  Fingerprint many;
  for (int i = 0; i < kMaxTensorsPerContribution; ++i) {
    many.push_back({std::to_string(i) + std::string(kMaxTensorNameBytes - 8,
                                                    'n'),
                    DType::kU8,
                    {1}});
  }
  const absl::Status bytes =
      CheckFingerprintForOp(v1::ALL_GATHER_BYTES, many, "rank 3");
  ExpectInvalid(bytes, {"rank 3: ALL_GATHER_BYTES", "0nnnn", "7nnnn",
                        "... and 4088 more"});
  EXPECT_LT(bytes.message().size(), 2048u) << bytes.message().size();
  Fingerprint fewer(many.begin(), many.begin() + 5);
  const absl::Status counts =
      CompareFingerprints(v1::ALL_GATHER, 0, many, 1, fewer);
  ExpectInvalid(counts, {"rank 1 has 5", "rank 0 has 4096", "and 4088 more"});
  EXPECT_LT(counts.message().size(), 2048u) << counts.message().size();
}

TEST(CheckFingerprintForOpTest, OtherOps) {
  EXPECT_TRUE(CheckFingerprintForOp(v1::ALL_GATHER, One({}), "x").ok());
  EXPECT_TRUE(CheckFingerprintForOp(v1::BROADCAST, One({}), "x").ok());
  ExpectInvalid(CheckFingerprintForOp(v1::ALL_GATHER_V, One({}), "x"),
                {"x: ALL_GATHER_V needs tensors of rank >= 1"});
  // A broadcast's shapes must agree exactly.
  ExpectInvalid(CompareFingerprints(v1::BROADCAST, 0, One({2}), 1, One({3})),
                {"shape"});
}

TEST(OpNameTest, WireNames) {
  EXPECT_EQ(OpName(v1::ALL_GATHER), "ALL_GATHER");
  EXPECT_EQ(OpName(v1::ALL_GATHER_V), "ALL_GATHER_V");
  EXPECT_EQ(OpName(v1::ALL_GATHER_BYTES), "ALL_GATHER_BYTES");
  EXPECT_EQ(OpName(v1::BROADCAST), "BROADCAST");
}

}  // namespace
}  // namespace fedgather
