#ifndef FEDGATHER_COMMON_CLOCK_H_
#define FEDGATHER_COMMON_CLOCK_H_

#include <chrono>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace fedgather {

// Clock is the time source of the server and the client: every deadline,
// timestamp, window and backoff reads it, and no code under server/ or
// client/ calls absl::Now() itself. It is passed in through the options
// structs (ServerOptions::clock, ClientOptions::clock, ...) as a borrowed
// pointer; the owner of the options owns the clock, which must outlive
// everything built from them. The default everywhere is SystemClock().
//
// Waiting. A wait is stated on this clock (a duration or a deadline), but
// the blocking itself is done by the implementation, so that a fake clock
// never makes a loop that waits for a time hang: SystemClock blocks for real
// time; FakeClock never blocks for the fake duration (see below).
//
// All methods are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;

  // Now returns the current time on this clock.
  virtual absl::Time Now() = 0;

  // SleepFor blocks the calling thread until `d` has passed on this clock.
  virtual void SleepFor(absl::Duration d) = 0;

  // WaitForNotification blocks until `n` is notified or `deadline` has
  // passed on this clock, and returns whether `n` was notified.
  virtual bool WaitForNotification(absl::Notification* n,
                                   absl::Time deadline) = 0;

  // Await blocks, with `mu` held by the caller (it is released while
  // waiting), until `cond` holds or `deadline` has passed on this clock,
  // and returns whether `cond` holds.
  virtual bool Await(absl::Mutex* mu, const absl::Condition& cond,
                     absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;
};

// SystemClock returns the process-wide real clock (absl::Now, real waits).
// It is never destroyed.
Clock* SystemClock();

// RealDeadlineAfter is the real time `timeout` from now, for gRPC deadlines
// (ClientContext::set_deadline, Server::Shutdown): gRPC measures them on the
// real clock, so they are timeouts, never readings of an injected Clock.
std::chrono::system_clock::time_point RealDeadlineAfter(absl::Duration timeout);

// FakeClock is a clock for tests: its time moves only when a test calls
// Advance or SetNow, or when code waits on it. SleepFor(d) advances it by `d`
// and returns at once. WaitForNotification and Await first wait up to
// `real_slice` of real time (default 1 ms) for the event, then, if it has not
// happened, advance the clock to the deadline and return false; so a loop
// that sleeps or waits until a deadline ends in a bounded number of real
// milliseconds, and a wait whose event comes meanwhile sees it.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(24),
                     absl::Duration real_slice = absl::Milliseconds(1))
      : now_(start), real_slice_(real_slice) {}

  absl::Time Now() override;
  void SleepFor(absl::Duration d) override;
  bool WaitForNotification(absl::Notification* n, absl::Time deadline) override;
  bool Await(absl::Mutex* mu, const absl::Condition& cond, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) override;

  // Advance moves the clock forward by `d` (a negative `d` is ignored).
  void Advance(absl::Duration d);
  // SetNow sets the clock to `t`, which may be earlier than Now().
  void SetNow(absl::Time t);

 private:
  // AdvanceTo moves the clock to `t` when that is later than now.
  void AdvanceTo(absl::Time t);

  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  const absl::Duration real_slice_;
};

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_CLOCK_H_
