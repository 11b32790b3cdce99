// RecordingEvents: the suite's one fake EventSink. It records every event
// the server's parts report, in order, for a test to read or wait for.
//
// Thread safety: thread-safe; OnEvent may be called from any thread while a
// test reads or waits.
#ifndef FEDGATHER_TESTS_SERVER_EVENTS_RECORDING_EVENTS_H_
#define FEDGATHER_TESTS_SERVER_EVENTS_RECORDING_EVENTS_H_

#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/events/event_sink.h"

namespace fedgather::testing {

class RecordingEvents : public server::EventSink {
 public:
  void OnEvent(const server::ServerEvent& event) override;

  // A copy of every event recorded so far, in order.
  std::vector<server::ServerEvent> events() const;
  // The events of `kind`, in order.
  std::vector<server::ServerEvent> OfKind(server::EventKind kind) const;
  // The kind of every event, in order.
  std::vector<server::EventKind> Kinds() const;
  // Clear forgets every event recorded so far.
  void Clear();

  // WaitFor returns true once an event satisfying `match` has been
  // recorded (before or during the call), false after `timeout`.
  bool WaitFor(const std::function<bool(const server::ServerEvent&)>& match,
               absl::Duration timeout);

 private:
  mutable absl::Mutex mu_;
  std::vector<server::ServerEvent> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedgather::testing

#endif  // FEDGATHER_TESTS_SERVER_EVENTS_RECORDING_EVENTS_H_
