#include "server/observe/audit_event_sink.h"

#include "common/fingerprint.h"

namespace fedgather::server {
namespace {

// The audit action of an event: what was attempted or what happened.
std::string ActionOf(const ServerEvent& event) {
  switch (event.kind) {
    case EventKind::kServerStarted:
      return "server_start";
    case EventKind::kServerStopped:
      return "server_stop";
    case EventKind::kPolicyReloaded:
      return "policy_reload";
    case EventKind::kAccessDenied:
    case EventKind::kLimitExceeded:
      return event.action;
    case EventKind::kJoinRefused:
    case EventKind::kMemberJoined:
      return "join";
    case EventKind::kMemberLeft:
      return "leave";
    case EventKind::kGroupFormed:
      return "group_formed";
    case EventKind::kGroupDissolved:
      return "group_ended";
    case EventKind::kCollectiveRefused:
      return "contribute";
    case EventKind::kContributionStarted:
      return "contribution_start";  // not written; see OnEvent
    case EventKind::kContributionComplete:
      return "contribution";
    case EventKind::kRoundCompleted:
      return "commit";
    case EventKind::kRoundFailed:
      return "abort";
    case EventKind::kStatusRead:
      return "status";
    case EventKind::kRoundsAborted:
      return "abort_request";
    case EventKind::kStreamResumed:
      return "resume";
    case EventKind::kEquivocation:
      return "equivocation";
    case EventKind::kGroupRestored:
      return "restore";
    case EventKind::kConnectionsRefused:
      return "connections_refused";
    case EventKind::kDataPlaneChosen:
      return "data_plane";
    case EventKind::kAuditUnwritable:
    case EventKind::kAuditWritable:
      return EventKindName(event.kind);  // not written; see OnEvent
  }
  return EventKindName(event.kind);
}

}  // namespace

AuditRecord AuditRecordFromEvent(const ServerEvent& event) {
  AuditRecord record;
  record.action = ActionOf(event);
  if (!event.identity.empty()) record.identity = event.identity;
  if (!event.peer.empty()) record.peer = event.peer;
  if (!event.group.empty()) record.group = event.group;
  if (event.epoch > 0) record.epoch = event.epoch;
  record.collective_seq = event.seq;
  if (event.rank >= 0) record.rank = event.rank;
  if (event.op != v1::OP_UNSPECIFIED) record.op = OpName(event.op);
  if (event.bytes > 0 || event.kind == EventKind::kContributionComplete ||
      event.kind == EventKind::kRoundCompleted) {
    record.bytes = event.bytes;
  }
  if (!event.digest_algorithm.empty()) {
    record.digest_algorithm = event.digest_algorithm;
  }
  if (!event.digest_hex.empty()) record.digest_hex = event.digest_hex;
  record.digests = event.contributions;
  record.outcome = absl::StatusCodeToString(event.status.code());
  if (!event.status.ok()) record.reason = std::string(event.status.message());
  record.details = event.details;
  return record;
}

void AuditEventSink::OnEvent(const ServerEvent& event) {
  // A contribution is audited when it completes (with its digest) or when
  // its round fails (naming who had not finished); its start adds nothing.
  // The log reports its own failures (its "audit_gap" record).
  if (event.kind != EventKind::kContributionStarted &&
      event.kind != EventKind::kAuditUnwritable &&
      event.kind != EventKind::kAuditWritable) {
    log_->Append(AuditRecordFromEvent(event));
  }
  if (next_ != nullptr) next_->OnEvent(event);
}

}  // namespace fedgather::server
