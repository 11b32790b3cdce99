#include "common/bounded_text.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "common/grpc_status.h"
#include "gtest/gtest.h"

namespace fedgather {
namespace {

TEST(TruncateTextTest, ShortTextIsKept) {
  EXPECT_EQ(TruncateText("abc", 3), "abc");
  EXPECT_EQ(TruncateText("", 0), "");
}

TEST(TruncateTextTest, LongTextIsCutAndSaysHowMuch) {
  EXPECT_EQ(TruncateText(std::string(10, 'x'), 4), "xxxx...(+6 bytes)");
}

TEST(TruncateTextTest, CutsAtACharacterBoundary) {
  // "é" is two bytes (C3 A9): a cut inside it backs up before it.
  EXPECT_EQ(TruncateText("a\xC3\xA9z", 2), "a...(+3 bytes)");
  EXPECT_EQ(TruncateText("a\xC3\xA9z", 3), "a\xC3\xA9...(+1 bytes)");
}

TEST(BoundStatusTest, CutsTheMessageAndKeepsCodeAndPayloads) {
  absl::Status big = absl::InvalidArgumentError(std::string(100000, 'n'));
  big.SetPayload("fedgather/retry", absl::Cord("1"));
  const absl::Status bounded = BoundStatus(big);
  EXPECT_EQ(bounded.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bounded.message(),
            std::string(kMaxStatusMessageBytes, 'n') + "...(+" +
                std::to_string(100000 - kMaxStatusMessageBytes) + " bytes)");
  EXPECT_EQ(bounded.GetPayload("fedgather/retry"), absl::Cord("1"));
  const absl::Status small = absl::NotFoundError("small");
  EXPECT_EQ(BoundStatus(small), small);
}

TEST(JoinBoundedTest, ListsTheFirstItemsCutAndCountsTheRest) {
  const std::vector<absl::string_view> items = {"a", "bbbbbb", "c", "d"};
  EXPECT_EQ(JoinBounded(items, 2, 3), "a, bbb...(+3 bytes), ... and 2 more");
  EXPECT_EQ(JoinBounded(items, 4, 10), "a, bbbbbb, c, d");
  EXPECT_EQ(JoinBounded({}, 4, 10), "");
}

// Every status the server sends passes through ToGrpcStatus: an admin call
// refused for a certificate claiming a 30 KB identity once answered with a
// 30 KB message, which gRPC clients refuse ("received initial metadata size
// exceeds limit").
TEST(ToGrpcStatusTest, CutsTheMessageAndKeepsTheCode) {
  const std::string identity = "spiffe://x/" + std::string(30000, 'm');
  const grpc::Status sent =
      ToGrpcStatus(absl::PermissionDeniedError("denied to " + identity));
  EXPECT_EQ(sent.error_code(), grpc::PERMISSION_DENIED);
  EXPECT_EQ(sent.error_message(),
            TruncateText("denied to " + identity, kMaxStatusMessageBytes));
  EXPECT_EQ(ToGrpcStatus(absl::NotFoundError("no group")).error_message(),
            "no group");
}

}  // namespace
}  // namespace fedgather
