#include "client/server_liveness.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace fedgather {
namespace {

using ::testing::HasSubstr;

const absl::Time kStart = absl::FromUnixSeconds(1000);

TEST(ServerLivenessTest, FailsOnlyAfterATimeoutOfSilenceWhileWatched) {
  ServerLiveness liveness("127.0.0.1:4000", "demo");
  EXPECT_TRUE(liveness.Check(kStart + absl::Hours(1)).ok());  // not watched
  liveness.Watch(absl::Seconds(2), absl::Milliseconds(500), kStart);
  EXPECT_EQ(liveness.check_every(), absl::Milliseconds(500));
  EXPECT_TRUE(liveness.Check(kStart + absl::Seconds(2)).ok());
  liveness.Heard(kStart + absl::Seconds(1));
  EXPECT_TRUE(liveness.Check(kStart + absl::Seconds(3)).ok());
  const absl::Status silent = liveness.Check(kStart + absl::Milliseconds(3500));
  EXPECT_EQ(silent.code(), absl::StatusCode::kUnavailable) << silent;
  EXPECT_THAT(std::string(silent.message()),
              HasSubstr("group 'demo': the server 127.0.0.1:4000 sent nothing "
                        "for 2.5s (heartbeat timeout 2s); it may be down or "
                        "unreachable"));
  // It stays failed, whatever arrives later.
  liveness.Heard(kStart + absl::Seconds(4));
  EXPECT_EQ(liveness.Check(kStart + absl::Seconds(4)), silent);
}

TEST(ServerLivenessTest, APausedWatchNeverFailsAndWatchRestartsIt) {
  ServerLiveness liveness("s:1", "g");
  liveness.Watch(absl::Seconds(2), absl::Seconds(1), kStart);
  liveness.Pause();  // the session broke; its resume has its own bound
  EXPECT_TRUE(liveness.Check(kStart + absl::Minutes(1)).ok());
  liveness.Watch(absl::Seconds(2), absl::Seconds(1), kStart + absl::Minutes(1));
  EXPECT_TRUE(
      liveness.Check(kStart + absl::Minutes(1) + absl::Seconds(2)).ok());
  EXPECT_FALSE(
      liveness.Check(kStart + absl::Minutes(1) + absl::Seconds(3)).ok());
}

TEST(ServerLivenessTest, AZeroTimeoutIsNeverChecked) {
  ServerLiveness liveness("s:1", "g");
  liveness.Watch(absl::ZeroDuration(), absl::Seconds(1), kStart);
  EXPECT_TRUE(liveness.Check(kStart + absl::Hours(1)).ok());
}

}  // namespace
}  // namespace fedgather
