// ServerEvent and EventSink: what the server reports about membership and
// rounds. The server binary logs them; the audit log and metrics attach here.
// Tests use a sink to learn that a round reached a given point.
#ifndef FEDGATHER_SERVER_EVENT_SINK_H_
#define FEDGATHER_SERVER_EVENT_SINK_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "server/pending_callbacks.h"

namespace fedgather::server {

enum class EventKind {
  kJoinRefused,           // a join was refused; status says why
  kMemberJoined,          // an identity is waiting for its group to form
  kGroupFormed,           // every member joined; ranks are assigned
  kGroupDissolved,        // the epoch ended; status says why
  kCollectiveRefused,     // a collective stream was refused before a round
  kContributionStarted,   // a rank's header was accepted into a round
  kContributionComplete,  // a rank's upload ended with a matching digest
  kRoundCompleted,        // every contribution is in; commits are going out
  kRoundFailed,           // the round failed on every rank with status
};

const char* EventKindName(EventKind kind);

struct ServerEvent {
  EventKind kind;
  std::string group;
  uint64_t epoch = 0;
  uint64_t seq = 0;
  int rank = -1;         // -1 when not about one rank
  std::string identity;  // empty when not about one identity
  int64_t bytes = 0;     // payload bytes, where meaningful
  absl::Status status;   // why, for refusals and failures
};

// EventSink receives events from gRPC threads, concurrently and never under
// a server lock. Implementations must be thread-safe and must not block.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void OnEvent(const ServerEvent& event) = 0;
};

// DeferEvent adds the delivery of `event` to `sink` (which may be null: then
// nothing happens) to `callbacks`, so it runs after the caller's lock.
inline void DeferEvent(EventSink* sink, ServerEvent event,
                       PendingCallbacks* callbacks) {
  if (sink == nullptr) return;
  callbacks->Add([sink, event = std::move(event)] { sink->OnEvent(event); });
}

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_EVENT_SINK_H_
