#include "tests/server/events/recording_events.h"

namespace fedgather::testing {

void RecordingEvents::OnEvent(const server::ServerEvent& event) {
  absl::MutexLock lock(&mu_);
  events_.push_back(event);
}

std::vector<server::ServerEvent> RecordingEvents::events() const {
  absl::MutexLock lock(&mu_);
  return events_;
}

std::vector<server::ServerEvent> RecordingEvents::OfKind(
    server::EventKind kind) const {
  absl::MutexLock lock(&mu_);
  std::vector<server::ServerEvent> out;
  for (const server::ServerEvent& e : events_) {
    if (e.kind == kind) out.push_back(e);
  }
  return out;
}

std::vector<server::EventKind> RecordingEvents::Kinds() const {
  absl::MutexLock lock(&mu_);
  std::vector<server::EventKind> kinds;
  for (const server::ServerEvent& e : events_) kinds.push_back(e.kind);
  return kinds;
}

void RecordingEvents::Clear() {
  absl::MutexLock lock(&mu_);
  events_.clear();
}

bool RecordingEvents::WaitFor(
    const std::function<bool(const server::ServerEvent&)>& match,
    absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto seen = [&] {
    for (const server::ServerEvent& e : events_) {
      if (match(e)) return true;
    }
    return false;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&seen), timeout);
}

}  // namespace fedgather::testing
