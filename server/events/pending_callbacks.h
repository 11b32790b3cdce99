// PendingCallbacks collects calls decided under a lock (waking a stream,
// reporting an event) so they run after the lock is released. State-changing
// methods take a PendingCallbacks* and add to it; the caller owns it and it
// runs when the caller's scope ends, or at an explicit Run().
#ifndef FEDGATHER_SERVER_EVENTS_PENDING_CALLBACKS_H_
#define FEDGATHER_SERVER_EVENTS_PENDING_CALLBACKS_H_

#include <functional>
#include <utility>
#include <vector>

namespace fedgather::server {

class PendingCallbacks {
 public:
  PendingCallbacks() = default;
  PendingCallbacks(const PendingCallbacks&) = delete;
  PendingCallbacks& operator=(const PendingCallbacks&) = delete;
  ~PendingCallbacks() { Run(); }

  void Add(std::function<void()> callback) {
    callbacks_.push_back(std::move(callback));
  }

  // Discard drops the collected callbacks without running them (a restore
  // replays history whose wake-ups and events already happened).
  void Discard() { callbacks_.clear(); }

  // Run calls every collected callback in order; callbacks may add more.
  void Run() {
    for (size_t i = 0; i < callbacks_.size(); ++i) {
      std::function<void()> callback = std::move(callbacks_[i]);
      callback();
    }
    callbacks_.clear();
  }

 private:
  std::vector<std::function<void()>> callbacks_;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_EVENTS_PENDING_CALLBACKS_H_
