#include "common/clock.h"

#include "absl/time/clock.h"

namespace fedgather {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  void SleepFor(absl::Duration d) override { absl::SleepFor(d); }
  bool WaitForNotification(absl::Notification* n,
                           absl::Time deadline) override {
    return n->WaitForNotificationWithDeadline(deadline);
  }
  bool Await(absl::Mutex* mu, const absl::Condition& cond, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) override {
    return mu->AwaitWithDeadline(cond, deadline);
  }
};

}  // namespace

Clock* SystemClock() {
  static Clock* const clock = new RealClock();
  return clock;
}

std::chrono::system_clock::time_point RealDeadlineAfter(
    absl::Duration timeout) {
  return absl::ToChronoTime(absl::Now() + timeout);
}

absl::Time FakeClock::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeClock::SleepFor(absl::Duration d) { Advance(d); }

bool FakeClock::WaitForNotification(absl::Notification* n,
                                    absl::Time deadline) {
  if (n->HasBeenNotified()) return true;
  if (Now() >= deadline) return false;
  if (n->WaitForNotificationWithTimeout(real_slice_)) return true;
  AdvanceTo(deadline);
  return false;
}

bool FakeClock::Await(absl::Mutex* mu, const absl::Condition& cond,
                      absl::Time deadline) {
  if (cond.Eval()) return true;
  if (Now() >= deadline) return false;
  if (mu->AwaitWithTimeout(cond, real_slice_)) return true;
  AdvanceTo(deadline);
  return false;
}

void FakeClock::Advance(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return;
  absl::MutexLock lock(&mu_);
  now_ += d;
}

void FakeClock::SetNow(absl::Time t) {
  absl::MutexLock lock(&mu_);
  now_ = t;
}

void FakeClock::AdvanceTo(absl::Time t) {
  absl::MutexLock lock(&mu_);
  if (t > now_) now_ = t;
}

}  // namespace fedgather
