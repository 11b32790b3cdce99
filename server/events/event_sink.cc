#include "server/events/event_sink.h"

namespace fedgather::server {

const char* EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kServerStarted:
      return "server_started";
    case EventKind::kServerStopped:
      return "server_stopped";
    case EventKind::kPolicyReloaded:
      return "policy_reloaded";
    case EventKind::kAccessDenied:
      return "access_denied";
    case EventKind::kLimitExceeded:
      return "limit_exceeded";
    case EventKind::kJoinRefused:
      return "join_refused";
    case EventKind::kMemberJoined:
      return "member_joined";
    case EventKind::kMemberLeft:
      return "member_left";
    case EventKind::kGroupFormed:
      return "group_formed";
    case EventKind::kGroupDissolved:
      return "group_dissolved";
    case EventKind::kCollectiveRefused:
      return "collective_refused";
    case EventKind::kContributionStarted:
      return "contribution_started";
    case EventKind::kContributionComplete:
      return "contribution_complete";
    case EventKind::kRoundCompleted:
      return "round_completed";
    case EventKind::kRoundFailed:
      return "round_failed";
    case EventKind::kStatusRead:
      return "status_read";
    case EventKind::kRoundsAborted:
      return "rounds_aborted";
    case EventKind::kStreamResumed:
      return "stream_resumed";
    case EventKind::kEquivocation:
      return "equivocation";
    case EventKind::kGroupRestored:
      return "group_restored";
    case EventKind::kConnectionsRefused:
      return "connections_refused";
    case EventKind::kAuditUnwritable:
      return "audit_unwritable";
    case EventKind::kAuditWritable:
      return "audit_writable";
    case EventKind::kDataPlaneChosen:
      return "data_plane_chosen";
  }
  return "unknown";
}

}  // namespace fedgather::server
