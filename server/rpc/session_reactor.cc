#include "server/rpc/session_reactor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/bounded_text.h"
#include "common/grpc_status.h"

namespace fedgather::server {

SessionReactor* SessionReactor::Start(grpc::CallbackServerContext* context,
                                      GroupRegistry* registry,
                                      AccessControl* access,
                                      FirstFrameDeadlines* first_frame,
                                      absl::StatusOr<Admission> admission,
                                      Clock* clock) {
  const bool admitted = admission.ok();
  std::shared_ptr<SessionReactor> reactor(new SessionReactor(
      context, registry, access, admitted ? *std::move(admission) : Admission{},
      std::move(clock)));
  reactor->self_ = reactor;
  if (!admitted) {
    reactor->Close(admission.status());
  } else {
    if (ServerCounters* metrics = registry->metrics(); metrics != nullptr) {
      metrics->StreamOpened(StreamKind::kSession);
      reactor->counted_ = true;
    }
    access->WatchSession(reactor->caller_, reactor);
    first_frame->Watch(reactor, reactor->clock_->Now());
    reactor->StartRead(&reactor->request_);
  }
  return reactor.get();
}

void SessionReactor::Revoke(const absl::Status& status) {
  // A revoked member may not resume: its epoch, and the rounds its
  // collective streams still feed, end now rather than after the grace.
  Lost(status.message(), status, /*left=*/true);
}

void SessionReactor::ExpireFirstFrameWait(absl::Duration limit) {
  {
    absl::MutexLock lock(&mu_);
    if (first_message_ || lost_) return;
    lost_ = true;  // a join read after this is ignored; no group to leave
  }
  const absl::Status status = absl::DeadlineExceededError(absl::StrCat(
      "the session sent no join within ", absl::FormatDuration(limit)));
  if (EventSink* events = registry_->events(); events != nullptr) {
    ServerEvent refused;
    refused.kind = EventKind::kJoinRefused;
    refused.identity = caller_.identity;
    refused.peer = caller_.peer;
    refused.status = status;
    events->OnEvent(refused);
  }
  Close(status);
}

SessionReactor::SessionReactor(grpc::CallbackServerContext* context,
                               GroupRegistry* registry, AccessControl* access,
                               Admission admission, Clock* clock)
    : context_(context),
      registry_(registry),
      access_(access),
      caller_(std::move(admission.caller)),
      stream_lease_(std::move(admission.stream)),
      clock_(clock) {}

absl::Status SessionReactor::HandleJoin(PendingCallbacks* callbacks) {
  if (request_.kind_case() != v1::SessionRequest::kJoin) {
    return absl::InvalidArgumentError(
        "the first message of a session must be a join");
  }
  const v1::JoinRequest& join = request_.join();
  // The access checks report their own refusals.
  if (absl::Status allowed =
          access_->Authorize(caller_, join.group(), Action::kJoin);
      !allowed.ok()) {
    return allowed;
  }
  if (registry_->draining() && join.resume_epoch() == 0) {
    return absl::UnavailableError(
        "the server is shutting down and takes no new joins; join again once "
        "it is back");
  }
  absl::StatusOr<IdentityUsage::Lease> lease =
      access_->AcquireGroup(caller_, join.group());
  if (!lease.ok()) return lease.status();
  absl::StatusOr<GroupState*> group =
      registry_->Find(join.group(), caller_.identity);
  absl::Status joined = group.status();
  if (group.ok()) {
    {
      absl::MutexLock lock(&mu_);
      group_ = *group;
      group_lease_ = *std::move(lease);
    }
    joined = (*group)->Join(caller_.identity, caller_.peer, join,
                            shared_from_this(), clock_->Now(), callbacks);
  }
  if (!joined.ok()) {
    ServerEvent refused;
    refused.kind = EventKind::kJoinRefused;
    refused.group = join.group();
    refused.identity = caller_.identity;
    refused.peer = caller_.peer;
    refused.status = BoundStatus(joined);
    DeferEvent(registry_->events(), std::move(refused), callbacks);
    absl::MutexLock lock(&mu_);
    group_ = nullptr;
    group_lease_.Release();
  }
  return joined;
}

void SessionReactor::OnReadDone(bool ok) {
  if (!ok) {
    Lost("its session stream closed");
    return;
  }
  PendingCallbacks callbacks;
  if (group_ == nullptr) {
    {
      absl::MutexLock lock(&mu_);
      if (lost_) return;  // expired (or revoked) before its join arrived
      first_message_ = true;
    }
    if (absl::Status joined = HandleJoin(&callbacks); !joined.ok()) {
      Close(joined);
      return;
    }
  } else if (request_.kind_case() == v1::SessionRequest::kLeave) {
    Lost("it left the group", absl::CancelledError("this member left"),
         /*left=*/true);
    return;
  } else if (request_.kind_case() == v1::SessionRequest::kPeerLinks) {
    if (absl::Status taken =
            group_->ReportPeerLinks(this, request_.peer_links(), &callbacks);
        !taken.ok()) {
      Close(absl::InvalidArgumentError(taken.message()));
      Lost("it sent a PeerLinks report out of turn");
      return;
    }
  } else if (request_.kind_case() == v1::SessionRequest::kPeerRefusal) {
    if (absl::Status taken = group_->ReportPeerRefusal(
            this, request_.peer_refusal(), &callbacks);
        !taken.ok()) {
      Close(absl::InvalidArgumentError(taken.message()));
      Lost("it sent a PeerRefusal report out of turn");
      return;
    }
  } else if (request_.kind_case() == v1::SessionRequest::kHeartbeat) {
    group_->Heartbeat(this, clock_->Now());
    {
      absl::MutexLock lock(&mu_);
      heartbeat_owed_ = true;
    }
    StartNextWrite();
  } else {
    Close(absl::InvalidArgumentError(
        "a session may join only once; later messages must be heartbeats, "
        "peer link reports or a leave"));
    Lost("it sent a second join");
    return;
  }
  StartRead(&request_);
}

void SessionReactor::SendJoined(const v1::Joined& joined) {
  v1::Joined sent = joined;
  // A member with a peer endpoint checks its links' certificates against
  // the server's revocations (docs/security.md, "Peer links").
  if (joined.rank() < static_cast<uint32_t>(joined.members_size()) &&
      !joined.members(static_cast<int>(joined.rank()))
           .peer_endpoint()
           .empty()) {
    sent.set_peer_crl(access_->crl_pem());
  }
  {
    absl::MutexLock lock(&mu_);
    joined_ = std::move(sent);
  }
  StartNextWrite();
}

void SessionReactor::SendDataPlane(const v1::DataPlaneChosen& chosen) {
  {
    absl::MutexLock lock(&mu_);
    data_plane_ = chosen;
  }
  StartNextWrite();
}

bool SessionReactor::NextEventLocked() {
  if (joined_.has_value()) {
    *event_.mutable_joined() = *std::move(joined_);
    joined_.reset();
    return true;
  }
  if (data_plane_.has_value()) {
    *event_.mutable_data_plane_chosen() = *std::move(data_plane_);
    data_plane_.reset();
    return true;
  }
  if (heartbeat_owed_) {
    heartbeat_owed_ = false;
    event_.mutable_heartbeat();
    return true;
  }
  return false;
}

void SessionReactor::StartNextWrite() {
  {
    absl::MutexLock lock(&mu_);
    if (write_in_flight_ || write_failed_ || finished_ || has_pending_finish_ ||
        !NextEventLocked()) {
      return;
    }
    write_in_flight_ = true;
  }
  StartWrite(&event_);
}

void SessionReactor::OnWriteDone(bool ok) {
  absl::Status finish;
  bool finishing = false;
  {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok) write_failed_ = true;  // the stream broke; its read ends too
    finishing = has_pending_finish_;
    has_pending_finish_ = false;
    finish = pending_finish_;
  }
  if (finishing) {
    Close(finish);
  } else {
    StartNextWrite();
  }
}

void SessionReactor::Close(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    if (write_in_flight_) {
      has_pending_finish_ = true;
      pending_finish_ = status;
      return;
    }
    finished_ = true;
  }
  context_->AddTrailingMetadata(kFinalStatusKey, "1");
  Finish(ToGrpcStatus(status));
}

void SessionReactor::Lost(absl::string_view why, const absl::Status& finish,
                          bool left) {
  GroupState* group = nullptr;
  IdentityUsage::Lease group_lease;  // given back when this call returns
  {
    absl::MutexLock lock(&mu_);
    if (lost_) return;
    lost_ = true;
    group = group_;
    group_lease = std::move(group_lease_);
  }
  if (group != nullptr) {
    PendingCallbacks callbacks;
    group->SessionLost(this, why, clock_->Now(), &callbacks, left);
  }
  Close(finish.ok() ? absl::CancelledError(absl::StrCat("session ended: ", why))
                    : finish);
}

void SessionReactor::OnCancel() { Lost("its session was cancelled"); }

void SessionReactor::OnDone() {
  Lost("its session finished");
  if (counted_) registry_->metrics()->StreamClosed(StreamKind::kSession);
  std::shared_ptr<SessionReactor> last = std::move(self_);
}

}  // namespace fedgather::server
