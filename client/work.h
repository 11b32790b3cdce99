// Work<T>: the handle of a collective started with one of Group's ...Async
// methods, as torch.distributed's Work is. It completes once, with the
// collective's status and, when that is OK, its result.
//
// Collectives of one Group run in the order they were started (their seq
// order), one after the other, so a Work completes only after every Work
// started before it on the same Group.
//
// Thread safety: every method may be called from any thread, and a Work may
// be copied (copies share the outcome) and outlive its Group. The memory a
// raw-buffer collective reads or writes must stay valid until its Work has
// completed.
#ifndef FEDGATHER_CLIENT_WORK_H_
#define FEDGATHER_CLIENT_WORK_H_

#include <memory>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fedgather {

// The result type of collectives that produce nothing but their status.
struct NoResult {};

template <typename T = NoResult>
class Work {
  struct State;  // defined below; Completer shares it

 public:
  // Wait blocks until the collective completes or `timeout` passes. Returns
  // the collective's status, or DEADLINE_EXCEEDED when it has not completed
  // in time; the collective then carries on and may still complete.
  absl::Status Wait(absl::Duration timeout = absl::InfiniteDuration()) const {
    absl::MutexLock lock(&state_->mu);
    if (!state_->mu.AwaitWithTimeout(
            absl::Condition(state_.get(), &State::Done), timeout)) {
      return absl::DeadlineExceededError(
          absl::StrCat("the collective did not complete within ",
                       absl::FormatDuration(timeout), "; it is still running"));
    }
    return state_->outcome->status();
  }

  // IsCompleted is whether the collective has completed, successfully or
  // not. Never blocks.
  bool IsCompleted() const {
    absl::MutexLock lock(&state_->mu);
    return state_->outcome.has_value();
  }

  // Get blocks until the collective completes and returns its result (a
  // copy; for tensors, a copy of the handle) or its error.
  absl::StatusOr<T> Get() const {
    absl::MutexLock lock(&state_->mu);
    state_->mu.Await(absl::Condition(state_.get(), &State::Done));
    return *state_->outcome;
  }

  // A Work and the function that completes it (once; later calls are
  // ignored). Made by whoever runs the collective.
  class Completer {
   public:
    void Complete(absl::StatusOr<T> outcome) const {
      absl::MutexLock lock(&state_->mu);
      if (!state_->outcome.has_value()) state_->outcome = std::move(outcome);
    }

   private:
    friend class Work;
    explicit Completer(std::shared_ptr<State> state)
        : state_(std::move(state)) {}
    std::shared_ptr<State> state_;
  };
  static std::pair<Work, Completer> Make() {
    auto state = std::make_shared<State>();
    return {Work(state), Completer(state)};
  }

 private:
  struct State {
    bool Done() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return outcome.has_value();
    }
    mutable absl::Mutex mu;
    std::optional<absl::StatusOr<T>> outcome ABSL_GUARDED_BY(mu);
  };
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

  std::shared_ptr<State> state_;
};

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_WORK_H_
