#include "client/session.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/bounded_text.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace fedgather {
namespace {

// IsTlsTrustFailure tells a TLS handshake that failed on the peer's
// certificate (a wrong CA, a server name the certificate does not hold): a
// configuration error, not a server that is still starting. gRPC reports it
// only as text, OpenSSL's reason or its own peer-name check.
bool IsTlsTrustFailure(const absl::Status& status) {
  return absl::StrContains(status.message(), "certificate verify failed") ||
         absl::StrContains(status.message(), "is not in peer certificate");
}

}  // namespace

Session::Session(std::shared_ptr<grpc::Channel> channel, std::string server,
                 std::string group, absl::Duration resume_grace, Clock* clock)
    : stub_(v1::Rendezvous::NewStub(channel)),
      name_(std::move(group)),
      liveness_(std::move(server), name_),
      resume_grace_(resume_grace),
      clock_(clock) {}

Session::~Session() {
  if (!left_) {
    BeginLeave();
    Leave();
  }
  if (session_thread_.joinable()) session_thread_.join();
}

void Session::BeginLeave() {
  absl::MutexLock lock(&mu_);
  leaving_ = true;
}

void Session::Leave() {
  left_ = true;
  {
    // Say so, so that the server ends the epoch at once rather than wait
    // for this member to resume (best effort: the stream may be broken).
    // A server found silent is not told: the write could wait on it.
    bool said = false;
    if (CheckServer().ok()) {
      absl::MutexLock lock(&write_mu_);
      v1::SessionRequest leave;
      leave.mutable_leave();
      said = session_ != nullptr && session_->Write(leave);
    }
    // A cancel could overtake the message on the wire: give the server a
    // moment to end the session on it first.
    if (said) session_over_.WaitForNotificationWithTimeout(absl::Seconds(2));
  }
  {
    absl::MutexLock lock(&mu_);
    if (session_context_ != nullptr) session_context_->TryCancel();
  }
  leave_.Notify();
}

absl::StatusOr<v1::Joined> Session::OpenSession(const v1::JoinRequest& request,
                                                absl::Duration timeout,
                                                bool* server_final) {
  *server_final = false;
  grpc::ClientContext* context;
  {
    absl::MutexLock write_lock(&write_mu_);
    session_.reset();  // the old stream goes before its context
    {
      absl::MutexLock lock(&mu_);
      if (leaving_) return absl::CancelledError("this member left the group");
      session_context_ = std::make_unique<grpc::ClientContext>();
      context = session_context_.get();
    }
    session_ = stub_->Session(context);
  }
  absl::Notification answered;
  bool timed_out = false;
  std::thread watchdog([&] {
    if (!answered.WaitForNotificationWithTimeout(timeout)) {
      timed_out = true;
      context->TryCancel();
    }
  });
  v1::SessionRequest join;
  *join.mutable_join() = request;
  v1::SessionEvent event;
  bool written;
  {
    absl::MutexLock write_lock(&write_mu_);
    written = session_->Write(join);
  }
  const bool got = written && session_->Read(&event);
  answered.Notify();
  watchdog.join();
  if (got && event.kind_case() == v1::SessionEvent::kJoined) {
    return event.joined();
  }
  const grpc::Status status = session_->Finish();
  *server_final =
      context->GetServerTrailingMetadata().count(kFinalStatusKey) > 0;
  if (timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat("the group did not form within the client timeout of ",
                     absl::FormatDuration(timeout)));
  }
  if (status.ok()) {
    return absl::InternalError("protocol error: the session ended at once");
  }
  return FromGrpcStatus(status);
}

absl::Status Session::Join(const v1::JoinRequest& request,
                           absl::Duration timeout,
                           absl::Duration connect_timeout) {
  const absl::Time start = clock_->Now();
  const absl::Time give_up = start + timeout;
  const absl::Time stop_connecting = start + std::min(connect_timeout, timeout);
  absl::Duration backoff = absl::Milliseconds(50);
  absl::StatusOr<v1::Joined> joined;
  for (int attempt = 1;; ++attempt) {
    bool server_final = false;
    joined = OpenSession(
        request, std::max(give_up - clock_->Now(), absl::Milliseconds(1)),
        &server_final);
    // Only a broken stream is tried again: the server did not answer it,
    // and the TLS handshake did not refuse the server's certificate.
    if (joined.ok() || server_final || !absl::IsUnavailable(joined.status()) ||
        IsTlsTrustFailure(joined.status())) {
      break;
    }
    if (clock_->Now() + backoff >= stop_connecting) {
      if (attempt == 1) break;
      return absl::UnavailableError(
          absl::StrCat("could not reach the server within ",
                       absl::FormatDuration(absl::Trunc(
                           clock_->Now() - start, absl::Milliseconds(100))),
                       " (", attempt,
                       " tries); the last error: ", joined.status().message()));
    }
    clock_->SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
  if (!joined.ok()) return joined.status();
  absl::StatusOr<DigestAlgorithm> digest = DigestAlgorithmFromProto(
      joined->digest_algorithm(), "the server's Joined");
  if (!digest.ok()) return digest.status();
  digest_algorithm_ = *digest;
  rank_ = static_cast<int>(joined->rank());
  world_size_ = static_cast<int>(joined->world_size());
  epoch_ = joined->epoch();
  max_chunk_bytes_ = joined->max_chunk_bytes();
  heartbeat_interval_ = absl::Milliseconds(joined->heartbeat_interval_ms());
  heartbeat_timeout_ = absl::Milliseconds(joined->heartbeat_timeout_ms());
  for (const v1::Member& member : joined->members()) {
    identities_.push_back(member.identity());
    peer_endpoints_.push_back(member.peer_endpoint());
  }
  peer_crl_ = joined->peer_crl();
  data_plane_ = joined->data_plane() == v1::DATA_PLANE_DIRECT
                    ? v1::DATA_PLANE_DIRECT
                    : v1::DATA_PLANE_RELAY;
  data_plane_reason_ = joined->data_plane_reason();
  StartHeartbeats();
  session_thread_ = std::thread([this] {
    RunSession();
    session_over_.Notify();
  });
  return absl::OkStatus();
}

void Session::StartHeartbeats() {
  // The Joined just arrived: the server is heard from as of now.
  liveness_.Watch(heartbeat_timeout_, heartbeat_interval_, clock_->Now());
  stop_heartbeats_ = std::make_unique<absl::Notification>();
  heartbeat_thread_ = std::thread([this, stop = stop_heartbeats_.get()] {
    v1::SessionRequest heartbeat;
    heartbeat.mutable_heartbeat();
    while (!stop->WaitForNotificationWithTimeout(heartbeat_interval_)) {
      absl::MutexLock write_lock(&write_mu_);
      if (!session_->Write(heartbeat)) {
        // The stream is broken even if it still reads: end it, so that
        // RunSession resumes it before the server misses our heartbeats.
        absl::MutexLock lock(&mu_);
        session_context_->TryCancel();
        break;
      }
    }
  });
}

void Session::StopHeartbeats() {
  stop_heartbeats_->Notify();
  heartbeat_thread_.join();
}

void Session::RunSession() {
  for (;;) {
    v1::SessionEvent event;
    // The server answers each heartbeat; every event shows it is alive.
    while (session_->Read(&event)) {
      liveness_.Heard(clock_->Now());
      if (event.kind_case() == v1::SessionEvent::kDataPlaneChosen) {
        absl::MutexLock lock(&mu_);
        data_plane_chosen_ = event.data_plane_chosen();
      }
    }
    liveness_.Pause();  // a broken session is resumed within its grace
    StopHeartbeats();
    const grpc::Status status = session_->Finish();
    bool final;
    {
      absl::MutexLock lock(&mu_);
      final = session_context_->GetServerTrailingMetadata().count(
                  kFinalStatusKey) > 0;
      // CheckServer found the server silent and ended the session.
      if (!session_status_.ok()) return;
      if (leaving_) {
        session_status_ = absl::CancelledError("this member left the group");
        return;
      }
    }
    absl::Status ended =
        status.ok() ? absl::UnavailableError("the server closed the session")
                    : FromGrpcStatus(status);
    // A session the server ended is over; a broken one is resumed.
    if (!final && resume_grace_ > absl::ZeroDuration()) {
      ended = ResumeSession(ended.message());
      if (ended.ok()) continue;
    }
    absl::MutexLock lock(&mu_);
    session_status_ =
        leaving_ ? absl::CancelledError("this member left the group") : ended;
    return;
  }
}

absl::Status Session::ReportPeerLinks(const absl::Status& links) {
  v1::SessionRequest report;
  report.mutable_peer_links()->set_code(static_cast<int32_t>(links.code()));
  report.mutable_peer_links()->set_message(TruncateText(links.message(), 1024));
  absl::MutexLock write_lock(&write_mu_);
  if (session_ == nullptr || !session_->Write(report)) {
    return absl::UnavailableError(
        "the session broke before this member could report its ring links");
  }
  return absl::OkStatus();
}

void Session::ReportPeerRefusal(const absl::Status& refusal) {
  v1::SessionRequest report;
  report.mutable_peer_refusal()->set_code(static_cast<int32_t>(refusal.code()));
  report.mutable_peer_refusal()->set_message(
      TruncateText(refusal.message(), 1024));
  absl::MutexLock write_lock(&write_mu_);
  if (session_ != nullptr) session_->Write(report);
}

absl::StatusOr<v1::DataPlaneChosen> Session::AwaitDataPlane(
    absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return data_plane_chosen_.has_value() || !session_status_.ok();
  };
  clock_->Await(&mu_, absl::Condition(&settled), deadline);
  if (data_plane_chosen_.has_value()) return *data_plane_chosen_;
  if (!session_status_.ok()) return session_status_;
  return absl::DeadlineExceededError(
      "the server did not choose the epoch's data plane in time");
}

absl::Status Session::CheckServer() {
  absl::Status silent = liveness_.Check(clock_->Now());
  if (silent.ok()) return silent;
  absl::MutexLock lock(&mu_);
  if (session_status_.ok()) {
    session_status_ = silent;
    // The session thread sees its stream end, and does not resume it.
    if (session_context_ != nullptr) session_context_->TryCancel();
  }
  return silent;
}

absl::Status Session::Check() {
  FG_RETURN_IF_ERROR(CheckServer());
  absl::MutexLock lock(&mu_);
  return session_status_;
}

absl::Status Session::ResumeSession(absl::string_view why) {
  v1::JoinRequest request;
  request.set_group(name_);
  request.set_world_size(static_cast<uint32_t>(world_size_));
  request.set_requested_rank(static_cast<uint32_t>(rank_));
  request.set_resume_epoch(epoch_);
  const absl::Time give_up = clock_->Now() + resume_grace_;
  absl::Duration backoff = absl::Milliseconds(50);
  absl::Status last;
  while (clock_->Now() < give_up) {
    bool server_final = false;
    absl::StatusOr<v1::Joined> joined = OpenSession(
        request, std::max(give_up - clock_->Now(), absl::Milliseconds(1)),
        &server_final);
    if (joined.ok()) {
      if (joined->epoch() != epoch_ ||
          joined->rank() != static_cast<uint32_t>(rank_)) {
        return absl::InternalError("protocol error: resumed another epoch");
      }
      StartHeartbeats();
      return absl::OkStatus();
    }
    last = joined.status();
    if (server_final || absl::IsCancelled(last)) return last;
    if (clock_->WaitForNotification(&leave_, clock_->Now() + backoff)) break;
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
  return absl::UnavailableError(absl::StrCat(
      "the session to the server broke (", why,
      ") and could not be resumed within ", absl::FormatDuration(resume_grace_),
      last.ok() ? "" : absl::StrCat(": ", last.message())));
}

}  // namespace fedgather
