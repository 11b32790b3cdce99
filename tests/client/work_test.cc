// Work<T> (client/work.h): completes once, shares its outcome between
// copies, and times out without completing.
#include "client/work.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "absl/synchronization/notification.h"

namespace fedgather {
namespace {

TEST(WorkTest, CompletesOnceAndEveryCopySeesTheFirstOutcome) {
  auto [work, completer] = Work<std::string>::Make();
  const Work<std::string> copy = work;
  EXPECT_FALSE(work.IsCompleted());
  completer.Complete(std::string("first"));
  completer.Complete(absl::InternalError("later calls are ignored"));
  EXPECT_TRUE(copy.IsCompleted());
  EXPECT_TRUE(work.Wait().ok());
  absl::StatusOr<std::string> got = copy.Get();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "first");
}

TEST(WorkTest, AnErrorIsWhatWaitAndGetReturn) {
  auto [work, completer] = Work<>::Make();
  completer.Complete(absl::UnavailableError("rank 1 left"));
  EXPECT_EQ(work.Wait().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(work.Get().status().message(), "rank 1 left");
}

TEST(WorkTest, WaitTimesOutWithoutCompletingIt) {
  auto [work, completer] = Work<int>::Make();
  const absl::Status waited = work.Wait(absl::Milliseconds(10));
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(waited.message().find("still running"), std::string::npos)
      << waited;
  EXPECT_FALSE(work.IsCompleted());
  // It may still complete afterwards, and then Wait returns its status.
  completer.Complete(7);
  EXPECT_TRUE(work.Wait(absl::ZeroDuration()).ok());
  EXPECT_EQ(*work.Get(), 7);
}

TEST(WorkTest, GetBlocksUntilAnotherThreadCompletesIt) {
  auto [work, completer] = Work<int>::Make();
  absl::Notification getting;
  absl::StatusOr<int> got;
  std::thread waiter([&, w = work] {
    getting.Notify();
    got = w.Get();
  });
  getting.WaitForNotification();
  completer.Complete(42);
  waiter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 42);
}

TEST(WorkTest, OutlivesWhoeverCompletesIt) {
  Work<int> kept = [] {
    auto [work, completer] = Work<int>::Make();
    completer.Complete(absl::CancelledError("the group was closed"));
    return work;
  }();
  EXPECT_EQ(kept.Wait().code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace fedgather
