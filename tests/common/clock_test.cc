// Clock (common/clock.h): the real clock reads and waits real time; a
// FakeClock moves only when told to or when code sleeps or waits on it, and
// a wait on it never blocks for the fake duration.
#include "common/clock.h"

#include <gtest/gtest.h>

#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace fedgather {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1796222727);

TEST(SystemClockTest, IsOneClockThatReadsRealTime) {
  EXPECT_EQ(SystemClock(), SystemClock());
  const absl::Time before = absl::Now();
  const absl::Time read = SystemClock()->Now();
  EXPECT_LE(before, read);
  EXPECT_LE(read, absl::Now());
}

TEST(SystemClockTest, WaitsEndAtTheDeadlineOrTheEvent) {
  absl::Notification never;
  EXPECT_FALSE(SystemClock()->WaitForNotification(
      &never, absl::Now() + absl::Milliseconds(5)));
  absl::Notification done;
  done.Notify();
  EXPECT_TRUE(
      SystemClock()->WaitForNotification(&done, absl::InfiniteFuture()));
  absl::Mutex mu;
  bool flag = true;
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(SystemClock()->Await(&mu, absl::Condition(&flag),
                                   absl::InfiniteFuture()));
}

TEST(FakeClockTest, MovesOnlyWhenTold) {
  FakeClock clock(kT0);
  EXPECT_EQ(clock.Now(), kT0);
  EXPECT_EQ(clock.Now(), kT0);
  clock.Advance(absl::Seconds(3));
  EXPECT_EQ(clock.Now(), kT0 + absl::Seconds(3));
  clock.Advance(-absl::Seconds(1));  // ignored
  EXPECT_EQ(clock.Now(), kT0 + absl::Seconds(3));
  clock.SetNow(kT0 - absl::Hours(1));
  EXPECT_EQ(clock.Now(), kT0 - absl::Hours(1));
}

TEST(FakeClockTest, SleepAdvancesAtOnce) {
  FakeClock clock(kT0);
  const absl::Time real_start = absl::Now();
  // An hour of fake sleeping, in steps, as a retry loop would.
  for (int i = 0; i < 60; ++i) clock.SleepFor(absl::Minutes(1));
  EXPECT_EQ(clock.Now(), kT0 + absl::Hours(1));
  EXPECT_LT(absl::Now() - real_start, absl::Seconds(10));
}

TEST(FakeClockTest, AWaitThatTimesOutMovesTheClockToItsDeadline) {
  FakeClock clock(kT0);
  absl::Notification never;
  EXPECT_FALSE(clock.WaitForNotification(&never, kT0 + absl::Minutes(5)));
  EXPECT_EQ(clock.Now(), kT0 + absl::Minutes(5));
  // A deadline already passed neither waits nor moves the clock.
  EXPECT_FALSE(clock.WaitForNotification(&never, kT0));
  EXPECT_EQ(clock.Now(), kT0 + absl::Minutes(5));

  absl::Mutex mu;
  bool flag = false;
  absl::MutexLock lock(&mu);
  EXPECT_FALSE(
      clock.Await(&mu, absl::Condition(&flag), kT0 + absl::Minutes(10)));
  EXPECT_EQ(clock.Now(), kT0 + absl::Minutes(10));
}

TEST(FakeClockTest, AWaitSeesItsEventAndLeavesTheClock) {
  FakeClock clock(kT0);
  absl::Notification done;
  done.Notify();
  EXPECT_TRUE(clock.WaitForNotification(&done, kT0 + absl::Minutes(5)));
  EXPECT_EQ(clock.Now(), kT0);

  absl::Mutex mu;
  bool flag = false;
  // The event comes from another thread within the real slice.
  FakeClock patient(kT0, /*real_slice=*/absl::Seconds(30));
  std::thread setter([&] {
    absl::MutexLock lock(&mu);
    flag = true;
  });
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(
        patient.Await(&mu, absl::Condition(&flag), kT0 + absl::Minutes(5)));
  }
  setter.join();
  EXPECT_EQ(patient.Now(), kT0);
}

TEST(FakeClockTest, ALoopUntilADeadlineEnds) {
  // The shape of FedgatherServer::Drain and the client's retry loops: it
  // must end on a fake clock that nobody advances by hand.
  FakeClock clock(kT0);
  absl::Notification never;
  const absl::Time deadline = kT0 + absl::Seconds(3);
  int turns = 0;
  while (clock.Now() < deadline) {
    if (clock.WaitForNotification(&never,
                                  clock.Now() + absl::Milliseconds(20))) {
      break;
    }
    ++turns;
  }
  EXPECT_EQ(turns, 150);
}

}  // namespace
}  // namespace fedgather
