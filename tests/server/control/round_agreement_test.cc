#include "server/control/round_agreement.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fedgather::server {
namespace {

using ::testing::HasSubstr;

const Fingerprint kTwoFloats = {TensorSpec{"t", DType::kF32, {2}}};

RoundAgreement Make() {
  return RoundAgreement("group 'g' epoch 1 seq 0", {"a", "b", "c"});
}

v1::CollectiveHeader Header(v1::Op op, uint32_t root = 0) {
  v1::CollectiveHeader header;
  header.set_op(op);
  header.set_root(root);
  return header;
}

TEST(RoundAgreementTest, TheFirstHeaderFixesTheOpAndLaterOnesMustAgree) {
  RoundAgreement agreement = Make();
  EXPECT_FALSE(agreement.Agreed());
  ASSERT_TRUE(agreement.Check(0, Header(v1::ALL_GATHER), kTwoFloats).ok());
  agreement.Accept(0, Header(v1::ALL_GATHER), kTwoFloats);
  EXPECT_TRUE(agreement.Agreed());
  EXPECT_EQ(agreement.op(), v1::ALL_GATHER);
  EXPECT_TRUE(agreement.Check(1, Header(v1::ALL_GATHER), kTwoFloats).ok());
  const absl::Status other =
      agreement.Check(1, Header(v1::BROADCAST), kTwoFloats);
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(other.message()),
              HasSubstr("rank 1 (b) called BROADCAST but rank 0 (a)"));
}

TEST(RoundAgreementTest, ABroadcastRootMustBeARankAndTheSameForAll) {
  RoundAgreement agreement = Make();
  EXPECT_EQ(agreement.Check(0, Header(v1::BROADCAST, 3), {}).code(),
            absl::StatusCode::kInvalidArgument);
  agreement.Accept(0, Header(v1::BROADCAST, 2), {});
  EXPECT_EQ(agreement.root(), 2u);
  EXPECT_EQ(agreement.Check(1, Header(v1::BROADCAST, 1), {}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RoundAgreementTest, WeightedMeanNeedsAPositiveWeight) {
  RoundAgreement agreement = Make();
  v1::CollectiveHeader header = Header(v1::ALL_REDUCE);
  header.set_reduce(v1::WEIGHTED_MEAN);
  header.set_weight(0);
  EXPECT_EQ(agreement.CheckWeight(0, header).code(),
            absl::StatusCode::kInvalidArgument);
  header.set_weight(3);
  EXPECT_TRUE(agreement.CheckWeight(0, header).ok());
}

TEST(RoundAgreementTest, AResumeWithAnotherHeaderOrDigestIsEquivocation) {
  RoundAgreement agreement = Make();
  agreement.Accept(0, Header(v1::ALL_GATHER), kTwoFloats);
  Digest first{};
  first[0] = 1;
  Digest second{};
  second[0] = 2;
  v1::CollectiveHeader resumed = Header(v1::ALL_GATHER);
  resumed.set_contribution_digest(first.data(), first.size());
  bool equivocation = false;
  absl::StatusOr<Digest> declared = agreement.CheckResume(
      0, resumed, kTwoFloats, std::nullopt, &equivocation);
  ASSERT_TRUE(declared.ok()) << declared.status();
  EXPECT_EQ(*declared, first);
  EXPECT_FALSE(agreement.DeclaredOther(0, first));
  EXPECT_TRUE(agreement.DeclaredOther(0, second));
  // Other tensors.
  EXPECT_FALSE(
      agreement.CheckResume(0, resumed, {}, std::nullopt, &equivocation).ok());
  EXPECT_TRUE(equivocation);
  // Other bytes than declared before.
  equivocation = false;
  resumed.set_contribution_digest(second.data(), second.size());
  const absl::Status bytes =
      agreement.CheckResume(0, resumed, kTwoFloats, std::nullopt, &equivocation)
          .status();
  EXPECT_TRUE(equivocation);
  EXPECT_THAT(std::string(bytes.message()), HasSubstr("(equivocation)"));
  // No digest at all: refused, but no equivocation.
  equivocation = false;
  resumed.clear_contribution_digest();
  EXPECT_EQ(
      agreement.CheckResume(0, resumed, kTwoFloats, std::nullopt, &equivocation)
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(equivocation);
}

}  // namespace
}  // namespace fedgather::server
