#include "server/event_sink.h"

namespace fedgather::server {

const char* EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kJoinRefused:
      return "join_refused";
    case EventKind::kMemberJoined:
      return "member_joined";
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
  }
  return "unknown";
}

}  // namespace fedgather::server
