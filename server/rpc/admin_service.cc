#include "server/rpc/admin_service.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/content_hasher.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace fedgather::server {
namespace {

// Answer authenticates the caller, runs `handle` and finishes the call.
template <typename Handler>
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context,
                                 AccessControl* access, absl::string_view rpc,
                                 Handler handle) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<Caller> caller =
      access->Authenticate(context->auth_context().get(), context->peer(), rpc);
  reactor->Finish(
      ToGrpcStatus(caller.ok() ? handle(*caller) : caller.status()));
  return reactor;
}

void AddGroupStatus(const GroupState::Snapshot& snapshot, Role role,
                    absl::Time now, v1::GroupStatus* out) {
  out->set_name(snapshot.config.name);
  out->set_role(RoleName(role));
  out->set_world_size(snapshot.config.world_size);
  out->set_min_quorum(snapshot.config.min_quorum);
  out->set_formed(snapshot.formed);
  out->set_epoch(snapshot.epoch);
  out->set_digest_algorithm(DigestAlgorithmToProto(snapshot.digest));
  if (snapshot.formed) {
    out->set_data_plane(snapshot.data_plane);
    out->set_data_plane_reason(snapshot.data_plane_reason);
  }
  for (size_t r = 0; r < snapshot.members.size(); ++r) {
    v1::Member* member = out->add_members();
    member->set_rank(static_cast<uint32_t>(r));
    member->set_identity(snapshot.members[r].identity);
    member->set_connected(snapshot.members[r].connected);
    member->set_peer_endpoint(snapshot.members[r].peer_endpoint);
    member->set_peer_link_bytes_sent(
        static_cast<uint64_t>(snapshot.members[r].peer_link_bytes_sent));
    member->set_peer_link_bytes_received(
        static_cast<uint64_t>(snapshot.members[r].peer_link_bytes_received));
  }
  for (const std::string& waiting : snapshot.waiting) out->add_waiting(waiting);
  for (const Round::Progress& progress : snapshot.rounds) {
    v1::RoundProgress* round = out->add_rounds();
    round->set_seq(progress.seq);
    for (int r : progress.started) round->add_started_ranks(r);
    for (int r : progress.complete) round->add_complete_ranks(r);
    for (int64_t bytes : progress.bytes_in) round->add_bytes_in(bytes);
    for (int64_t bytes : progress.bytes_out) round->add_bytes_out(bytes);
    round->set_buffered_bytes(progress.buffered_bytes);
    if (progress.deadline != absl::InfiniteFuture()) {
      round->set_deadline_in_ms(
          absl::ToInt64Milliseconds(progress.deadline - now));
    }
  }
}

}  // namespace

AdminService::AdminService(GroupRegistry* registry, AccessControl* access,
                           Clock* clock)
    : registry_(registry), access_(access), clock_(clock) {}

grpc::ServerUnaryReactor* AdminService::GetStatus(
    grpc::CallbackServerContext* context, const v1::StatusRequest* request,
    v1::StatusReply* reply) {
  return Answer(context, access_, "GetStatus", [&](const Caller& caller) {
    return Status(caller, *request, reply);
  });
}

grpc::ServerUnaryReactor* AdminService::AbortRound(
    grpc::CallbackServerContext* context, const v1::AbortRoundRequest* request,
    v1::AbortRoundReply* reply) {
  return Answer(context, access_, "AbortRound", [&](const Caller& caller) {
    return Abort(caller, *request, reply);
  });
}

grpc::ServerUnaryReactor* AdminService::ReloadPolicy(
    grpc::CallbackServerContext* context, const v1::ReloadPolicyRequest*,
    v1::ReloadPolicyReply* reply) {
  return Answer(context, access_, "ReloadPolicy",
                [&](const Caller& caller) { return Reload(caller, reply); });
}

absl::Status AdminService::Status(const Caller& caller,
                                  const v1::StatusRequest& request,
                                  v1::StatusReply* reply) {
  std::vector<std::string> names;
  if (!request.group().empty()) {
    FG_RETURN_IF_ERROR(
        access_->Authorize(caller, request.group(), Action::kReadStatus));
    names.push_back(request.group());
  } else {
    for (const GroupPolicy* group :
         access_->policy()->VisibleGroups(caller.identity)) {
      names.push_back(group->name);
    }
  }
  const std::shared_ptr<const AccessPolicy> policy = access_->policy();
  for (const std::string& name : names) {
    absl::StatusOr<GroupState*> group = registry_->Find(name, caller.identity);
    const std::optional<Role> role = policy->RoleOf(caller.identity, name);
    // A reload may have run since the check: show only what still holds.
    if (!group.ok() || !role.has_value()) continue;
    AddGroupStatus((*group)->GetSnapshot(), *role, clock_->Now(),
                   reply->add_groups());
  }
  ServerEvent read;
  read.kind = EventKind::kStatusRead;
  read.group = request.group();
  read.identity = caller.identity;
  read.peer = caller.peer;
  read.details.emplace_back("groups", absl::StrJoin(names, ","));
  if (EventSink* events = access_->events()) events->OnEvent(read);
  return absl::OkStatus();
}

absl::Status AdminService::Abort(const Caller& caller,
                                 const v1::AbortRoundRequest& request,
                                 v1::AbortRoundReply* reply) {
  FG_RETURN_IF_ERROR(
      access_->Authorize(caller, request.group(), Action::kAbortRound));
  FG_ASSIGN_OR_RETURN(GroupState * group,
                      registry_->Find(request.group(), caller.identity));
  const std::string reason =
      request.reason().empty() ? "no reason given" : request.reason();
  std::vector<uint64_t> aborted;
  {
    PendingCallbacks callbacks;
    aborted = group->AbortRounds(caller.identity, reason, &callbacks);
  }
  for (uint64_t seq : aborted) reply->add_aborted_seqs(seq);
  ServerEvent event;
  event.kind = EventKind::kRoundsAborted;
  event.group = request.group();
  event.identity = caller.identity;
  event.peer = caller.peer;
  event.details.emplace_back("reason", reason);
  event.details.emplace_back("seqs", absl::StrJoin(aborted, ","));
  if (EventSink* events = access_->events()) events->OnEvent(event);
  return absl::OkStatus();
}

absl::Status AdminService::Reload(const Caller& caller,
                                  v1::ReloadPolicyReply* reply) {
  FG_RETURN_IF_ERROR(access_->Authorize(caller, "", Action::kReloadPolicy));
  FG_RETURN_IF_ERROR(access_->Reload(caller));
  const std::shared_ptr<const AccessPolicy> policy = access_->policy();
  reply->set_policy_sha256(policy->sha256());
  reply->set_groups(static_cast<uint32_t>(policy->groups().size()));
  return absl::OkStatus();
}

}  // namespace fedgather::server
