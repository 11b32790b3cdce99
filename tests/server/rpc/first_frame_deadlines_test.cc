// FirstFrameDeadlines expires the streams still waiting at their deadline,
// once each, and never calls a stream that is gone.
#include "server/rpc/first_frame_deadlines.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace fedgather::server {
namespace {

class FakeStream : public FirstFrameWaiter {
 public:
  void ExpireFirstFrameWait(absl::Duration limit) override {
    expired_with.push_back(limit);
  }
  std::vector<absl::Duration> expired_with;
};

TEST(FirstFrameDeadlinesTest, ExpiresEachStreamOnceAtItsDeadline) {
  const absl::Time t0 = absl::UnixEpoch() + absl::Hours(1);
  FirstFrameDeadlines deadlines(absl::Seconds(10));
  auto early = std::make_shared<FakeStream>();
  auto late = std::make_shared<FakeStream>();
  deadlines.Watch(early, t0);
  deadlines.Watch(late, t0 + absl::Seconds(3));

  deadlines.Expire(t0 + absl::Seconds(10) - absl::Milliseconds(1));
  EXPECT_TRUE(early->expired_with.empty());
  deadlines.Expire(t0 + absl::Seconds(10));
  EXPECT_EQ(early->expired_with,
            std::vector<absl::Duration>{absl::Seconds(10)});
  EXPECT_TRUE(late->expired_with.empty());
  EXPECT_EQ(deadlines.watched(), 1u);

  deadlines.Expire(t0 + absl::Seconds(60));
  EXPECT_EQ(early->expired_with.size(), 1u);  // not again
  EXPECT_EQ(late->expired_with.size(), 1u);
  EXPECT_EQ(deadlines.watched(), 0u);
}

TEST(FirstFrameDeadlinesTest, AStreamThatIsGoneIsForgotten) {
  const absl::Time t0 = absl::UnixEpoch() + absl::Hours(1);
  FirstFrameDeadlines deadlines(absl::Seconds(1));
  auto gone = std::make_shared<FakeStream>();
  auto kept = std::make_shared<FakeStream>();
  deadlines.Watch(gone, t0);
  deadlines.Watch(kept, t0);
  gone.reset();  // ASan reports it if Expire touches the freed stream
  deadlines.Expire(t0 + absl::Seconds(2));
  EXPECT_EQ(kept->expired_with.size(), 1u);
  EXPECT_EQ(deadlines.watched(), 0u);
}

}  // namespace
}  // namespace fedgather::server
