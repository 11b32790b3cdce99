#include "server/session_reactor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"

namespace fedgather::server {

SessionReactor* SessionReactor::Start(GroupRegistry* registry,
                                      absl::StatusOr<std::string> identity,
                                      std::function<absl::Time()> clock) {
  std::shared_ptr<SessionReactor> reactor(new SessionReactor(
      registry, identity.ok() ? *identity : "", std::move(clock)));
  reactor->self_ = reactor;
  if (!identity.ok()) {
    reactor->Close(identity.status());
  } else {
    reactor->StartRead(&reactor->request_);
  }
  return reactor.get();
}

SessionReactor::SessionReactor(GroupRegistry* registry, std::string identity,
                               std::function<absl::Time()> clock)
    : registry_(registry),
      identity_(std::move(identity)),
      clock_(std::move(clock)) {}

void SessionReactor::OnReadDone(bool ok) {
  if (!ok) {
    Lost("its session stream closed");
    return;
  }
  PendingCallbacks callbacks;
  if (group_ == nullptr) {
    if (request_.kind_case() != v1::SessionRequest::kJoin) {
      Close(absl::InvalidArgumentError(
          "the first message of a session must be a join"));
      return;
    }
    absl::StatusOr<GroupState*> group =
        registry_->Find(request_.join().group(), identity_);
    absl::Status joined = group.status();
    if (group.ok()) {
      {
        absl::MutexLock lock(&mu_);
        group_ = *group;
      }
      joined = (*group)->Join(identity_, request_.join(), shared_from_this(),
                              clock_(), &callbacks);
    }
    if (!joined.ok()) {
      ServerEvent refused;
      refused.kind = EventKind::kJoinRefused;
      refused.group = request_.join().group();
      refused.identity = identity_;
      refused.status = joined;
      DeferEvent(registry_->events(), std::move(refused), &callbacks);
      {
        absl::MutexLock lock(&mu_);
        group_ = nullptr;
      }
      Close(joined);
      return;
    }
  } else if (request_.kind_case() == v1::SessionRequest::kHeartbeat) {
    group_->Heartbeat(this, clock_());
  } else {
    Close(absl::InvalidArgumentError(
        "a session may join only once; later messages must be heartbeats"));
    Lost("it sent a second join");
    return;
  }
  StartRead(&request_);
}

void SessionReactor::SendJoined(const v1::Joined& joined) {
  {
    absl::MutexLock lock(&mu_);
    if (finished_ || write_in_flight_) return;
    write_in_flight_ = true;
    *event_.mutable_joined() = joined;
  }
  StartWrite(&event_);
}

void SessionReactor::OnWriteDone(bool ok) {
  absl::Status finish;
  {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!has_pending_finish_) return;
    has_pending_finish_ = false;
    finish = pending_finish_;
  }
  Close(finish);
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
  Finish(ToGrpcStatus(status));
}

void SessionReactor::Lost(absl::string_view why) {
  GroupState* group = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (lost_) return;
    lost_ = true;
    group = group_;
  }
  if (group != nullptr) {
    PendingCallbacks callbacks;
    group->SessionLost(this, why, &callbacks);
  }
  Close(absl::CancelledError(absl::StrCat("session ended: ", why)));
}

void SessionReactor::OnCancel() { Lost("its session was cancelled"); }

void SessionReactor::OnDone() {
  Lost("its session finished");
  std::shared_ptr<SessionReactor> last = std::move(self_);
}

}  // namespace fedgather::server
