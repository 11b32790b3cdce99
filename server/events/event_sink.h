// ServerEvent and EventSink: what the server reports about access,
// membership and rounds. The audit log (server/observe/audit_event_sink.h) and
// the server binary's log attach here; tests use a sink to learn that a round
// reached a given point.
#ifndef FEDGATHER_SERVER_EVENTS_EVENT_SINK_H_
#define FEDGATHER_SERVER_EVENTS_EVENT_SINK_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "fedgather/v1/fedgather.pb.h"
#include "server/events/contribution_digest.h"
#include "server/events/pending_callbacks.h"

namespace fedgather::server {

enum class EventKind {
  kServerStarted,         // the server is serving; details: policy sha256
  kServerStopped,         // the server stopped serving
  kPolicyReloaded,        // a reload was tried; status: refused, or OK
  kAccessDenied,          // a call was refused: UNAUTHENTICATED (certificate)
                          // or PERMISSION_DENIED (policy); action says what
  kLimitExceeded,         // RESOURCE_EXHAUSTED; details name the limit
  kJoinRefused,           // a join was refused for another reason
  kMemberJoined,          // an identity is waiting for its group to form
  kMemberLeft,            // a member's session ended; status says why
  kGroupFormed,           // every member joined; ranks are assigned
  kGroupDissolved,        // the epoch ended; status says why
  kCollectiveRefused,     // a collective stream was refused before a round
  kContributionStarted,   // a rank's header was accepted into a round
  kContributionComplete,  // a rank's upload ended with a matching digest
  kRoundCompleted,        // every contribution is in; commits are going out
  kRoundFailed,           // the round failed on every rank with status
  kStatusRead,            // an admin, observer or member read a status
  kRoundsAborted,         // an admin aborted a group's rounds in flight
  kStreamResumed,         // a rank resumed its broken collective stream;
                          // details: upload and download positions, resent
  kEquivocation,          // a rank sent different data under one round key
  kGroupRestored,         // a restart restored the group's epoch from its
                          // state directory; details: rounds, journal bytes
  kConnectionsRefused,    // TCP connections refused by the connection caps
                          // since the last such event (at most one per
                          // period); details: counts by limit
  kAuditUnwritable,       // the audit log cannot be written (status says
                          // why): joins and new rounds are refused
  kAuditWritable,         // the audit log can be written again
  kDataPlaneChosen,       // a formed epoch's data plane was settled (its
                          // peer links reported) or fell back to the
                          // relay; details: the plane, why
};

const char* EventKindName(EventKind kind);

struct ServerEvent {
  EventKind kind;
  std::string action;  // for kAccessDenied and kLimitExceeded: what was asked
  std::string group;   // empty when not about one group
  uint64_t epoch = 0;  // 0 when not about one epoch
  std::optional<uint64_t> seq;  // the collective's seq, where there is one
  int rank = -1;                // -1 when not about one rank
  std::string identity;         // empty when not about one identity
  std::string peer;             // the caller's address, where known
  v1::Op op = v1::OP_UNSPECIFIED;
  int64_t bytes = 0;  // payload bytes, where meaningful
  // The algorithm ("blake3", "sha256") of digest_hex and contributions.
  std::string digest_algorithm;
  std::string digest_hex;  // a contribution's or an ALL_REDUCE result's
  std::vector<ContributionDigest> contributions;  // a commit's, by rank
  std::vector<std::pair<std::string, std::string>> details;
  absl::Status status;  // why, for refusals and failures
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

#endif  // FEDGATHER_SERVER_EVENTS_EVENT_SINK_H_
