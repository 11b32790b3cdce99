#include "server/fedgather_server.h"

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server_builder.h>

#include <climits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace fedgather::server {

absl::Status AuditAdmission(const absl::Status& audit) {
  if (audit.ok()) return audit;
  return absl::UnavailableError(
      absl::StrCat("the audit log cannot be written: ", audit.message(),
                   "; the server admits no joins or rounds until it can"));
}

FedgatherServer::FedgatherServer(ServerOptions options)
    : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<FedgatherServer>> FedgatherServer::Start(
    ServerOptions options) {
  if (options.policy_path.empty()) {
    return absl::InvalidArgumentError(
        "no access policy is configured (use --policy FILE)");
  }
  if (options.certificate_recheck_period <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "the certificate re-check period must be positive");
  }
  if (options.connection_idle_timeout <= absl::ZeroDuration() ||
      options.connection_idle_timeout > absl::Milliseconds(INT_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the connection idle timeout must be positive and at most ",
        absl::FormatDuration(absl::Milliseconds(INT_MAX)), ", not ",
        absl::FormatDuration(options.connection_idle_timeout)));
  }
  if (options.limits.max_chunk_bytes < 1 ||
      options.limits.max_chunk_bytes > (int64_t{4} << 20)) {
    return absl::InvalidArgumentError("max chunk bytes must be 1..4 MiB");
  }
  if (options.limits.heartbeat_interval <= absl::ZeroDuration() ||
      options.limits.heartbeat_interval * 2 >
          options.limits.heartbeat_timeout) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the heartbeat interval (",
        absl::FormatDuration(options.limits.heartbeat_interval),
        ") must be positive and at most half the heartbeat timeout (",
        absl::FormatDuration(options.limits.heartbeat_timeout), ")"));
  }
  const RefusalThrottleOptions& refusals = options.refusal_records;
  if (refusals.max_field_bytes < 16 ||
      refusals.window <= absl::ZeroDuration() ||
      refusals.bytes_per_second < 1 || refusals.burst_bytes < 1 ||
      refusals.max_keys < 1) {
    return absl::InvalidArgumentError(
        "refusal record bounds: the field bound must be >= 16 bytes, and the "
        "window, the bytes per second, the burst and the keys positive");
  }
  std::unique_ptr<FedgatherServer> server(
      new FedgatherServer(std::move(options)));
  ServerOptions& o = server->options_;
  // One clock for every part (ServerOptions::clock).
  o.limits.clock = o.clock;
  o.audit.clock = o.clock;
  if (!o.audit.path.empty()) {
    if (o.audit_sign && o.audit.signing_key_pem.empty()) {
      o.audit.signing_key_pem = o.tls.key_pem;
    }
    FG_ASSIGN_OR_RETURN(server->audit_log_, AuditLog::Open(o.audit));
    server->audit_sink_ = std::make_unique<AuditEventSink>(
        server->audit_log_.get(), o.limits.events);
    o.limits.events = server->audit_sink_.get();
    // Fail closed: no new join or round while their records cannot be
    // written (docs/security.md).
    o.limits.admission = [log = server->audit_log_.get()] {
      return AuditAdmission(log->status());
    };
  }
  if (o.limits.events != nullptr) {
    o.refusal_records.clock = o.clock;
    server->refusals_ =
        std::make_unique<RefusalThrottle>(o.refusal_records, o.limits.events);
    o.limits.events = server->refusals_.get();
  }
  if (!o.metrics_listen.empty()) {
    FG_ASSIGN_OR_RETURN(
        server->metrics_,
        ServerMetrics::Start(o.metrics_listen, o.limits.events, o.clock));
    o.limits.events = server->metrics_.get();
    o.limits.metrics = server->metrics_.get();
  }
  server->registry_ = std::make_unique<GroupRegistry>(o.limits);
  if (server->metrics_ != nullptr) {
    server->metrics_->Watch(server->registry_.get(), server->audit_log_.get(),
                            o.limits.max_buffered_bytes_per_round);
  }
  AccessControlOptions access;
  access.policy_path = o.policy_path;
  access.client_ca_pem = o.tls.ca_pem;
  access.crl_path = o.crl_path;
  access.registry = server->registry_.get();
  access.events = o.limits.events;
  access.clock = o.clock;
  FG_ASSIGN_OR_RETURN(server->access_, AccessControl::Create(access));
  {
    PendingCallbacks restored;  // events of the restore, after the lock
    FG_RETURN_IF_ERROR(
        server->registry_->RestoreState(o.clock->Now(), &restored));
  }
  server->first_frame_ =
      std::make_unique<FirstFrameDeadlines>(o.first_frame_timeout);
  server->service_ = std::make_unique<RendezvousService>(
      server->registry_.get(), server->access_.get(),
      server->first_frame_.get(), o.limits.max_chunk_bytes, o.clock);
  server->admin_ = std::make_unique<AdminService>(
      server->registry_.get(), server->access_.get(), o.clock);

  // The standard health service (grpc.health.v1.Health), gRPC's own: it
  // answers SERVING from here on, NOT_SERVING while the audit log cannot be
  // written (WatchAuditLog) and once a drain or Shutdown begins. It
  // runs no access check (it tells nothing but that); see docs/security.md.
  grpc::EnableDefaultHealthCheckService(true);
  // The gate listens and accepts; gRPC gets the connections it admits.
  ConnectionGateOptions gate;
  gate.listen_address = o.listen_address;
  gate.max_total = o.max_connections;
  gate.max_per_address = o.max_connections_per_address;
  gate.events = o.limits.events;
  gate.metrics = server->metrics_.get();
  gate.clock = o.clock;
  FG_ASSIGN_OR_RETURN(server->gate_, ConnectionGate::Bind(std::move(gate)));
  server->port_ = server->gate_->port();
  if (server->metrics_ != nullptr) {
    server->metrics_->WatchConnections(server->gate_->open());
  }
  grpc::ServerBuilder builder;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor =
      builder.experimental().AddExternalConnectionAcceptor(
          grpc::ServerBuilder::experimental_type::ExternalConnectionType::
              FROM_FD,
          MakeServerCredentials(o.tls));
  builder.RegisterService(server->service_.get());
  builder.RegisterService(server->admin_.get());
  // A chunk frame is at most max_chunk_bytes plus a few bytes of framing; a
  // header with many tensors may be larger, so leave room for it.
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(o.limits.max_chunk_bytes + (4 << 20)));
  // A connection that does not finish its TLS handshake in time is closed.
  builder.AddChannelArgument(
      GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
      static_cast<int>(absl::ToInt64Milliseconds(o.first_frame_timeout)));
  // A connection without a call for this long is closed (a member's
  // Session stream keeps its connection busy for the whole epoch).
  builder.AddChannelArgument(
      GRPC_ARG_MAX_CONNECTION_IDLE_MS,
      static_cast<int>(absl::ToInt64Milliseconds(o.connection_idle_timeout)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve on ", o.listen_address,
        ": gRPC did not start (do the TLS certificate and key match?)"));
  }
  server->gate_->Start(std::move(acceptor));
  // The restore above may have taken seconds (journals are replayed): the
  // restored members' grace to resume starts now that they can reach us.
  server->registry_->StartResumeGrace(o.clock->Now());
  if (o.limits.events != nullptr) {
    ServerEvent started;
    started.kind = EventKind::kServerStarted;
    started.details = {{"listen", o.listen_address},
                       {"port", absl::StrCat(server->port_)},
                       {"policy", o.policy_path},
                       {"policy_sha256", server->access_->policy()->sha256()}};
    server->access_->DescribeCrl(&started.details);
    o.limits.events->OnEvent(started);
  }
  server->timers_ = std::thread([s = server.get()] { s->RunTimers(); });
  return server;
}

absl::Status FedgatherServer::ReloadPolicy(const std::string& by) {
  Caller caller;
  caller.identity = by;
  return access_->Reload(caller);
}

void FedgatherServer::RunTimers() {
  absl::Time next_recheck =
      options_.clock->Now() + options_.certificate_recheck_period;
  while (!stop_.WaitForNotificationWithTimeout(options_.timer_period)) {
    const absl::Time now = options_.clock->Now();
    {
      PendingCallbacks callbacks;
      registry_->CheckTimers(now, &callbacks);
    }
    first_frame_->Expire(now);
    WatchAuditLog();
    if (refusals_ != nullptr) refusals_->CloseWindows(now);
    if (now >= next_recheck) {
      access_->RecheckSessions("periodic check");
      next_recheck = now + options_.certificate_recheck_period;
    }
  }
}

void FedgatherServer::WatchAuditLog() {
  if (audit_log_ == nullptr) return;
  const absl::Status status = audit_log_->status();
  if (status.ok() == audit_writable_) return;
  audit_writable_ = status.ok();
  // A drain has said NOT_SERVING for good.
  {
    absl::MutexLock lock(&health_mu_);
    if (!registry_->draining()) {
      server_->GetHealthCheckService()->SetServingStatus(audit_writable_);
    }
  }
  if (options_.limits.events != nullptr) {
    ServerEvent changed;
    changed.kind = audit_writable_ ? EventKind::kAuditWritable
                                   : EventKind::kAuditUnwritable;
    changed.details = {{"audit_log", options_.audit.path}};
    changed.status = AuditAdmission(status);
    options_.limits.events->OnEvent(changed);
  }
}

int FedgatherServer::metrics_port() const {
  return metrics_ != nullptr ? metrics_->port() : 0;
}

FedgatherServer::Drained FedgatherServer::Drain(absl::Duration timeout) {
  {
    PendingCallbacks callbacks;
    registry_->Drain(absl::UnavailableError(
                         "the server is shutting down; join again once it is "
                         "back"),
                     &callbacks);
  }
  // After the registry: whoever sees NOT_SERVING finds joins refused.
  if (server_ != nullptr) {
    absl::MutexLock lock(&health_mu_);
    server_->GetHealthCheckService()->SetServingStatus(false);
  }
  Clock* const clock = options_.clock;
  const absl::Time deadline = clock->Now() + timeout;
  while (registry_->RoundsInFlight() > 0 && clock->Now() < deadline) {
    clock->SleepFor(absl::Milliseconds(20));
  }
  Drained drained;
  const int late = registry_->RoundsInFlight();
  if (!options_.limits.state_dir.empty()) {
    drained.rounds_kept = late;
  } else if (late > 0) {
    drained.rounds_failed = late;
    PendingCallbacks callbacks;
    registry_->FailRounds(
        absl::StatusCode::kUnavailable,
        absl::StrCat("was still in flight when the server's drain timeout (",
                     absl::FormatDuration(timeout),
                     ") ran out; the server is shutting down"),
        &callbacks);
  }
  return drained;
}

absl::Status FedgatherServer::Shutdown(absl::Duration grace) {
  std::call_once(shutdown_once_, [this, grace] {
    stop_.Notify();
    if (timers_.joinable()) timers_.join();
    // No connection reaches gRPC once it shuts down (it would leak there).
    if (gate_ != nullptr) gate_->Stop();
    // Cancel open streams once the grace is over rather than wait for rounds
    // to finish.
    if (server_ != nullptr) {
      // gRPC measures the grace on the real clock.
      server_->Shutdown(RealDeadlineAfter(grace));
    }
    // Streams are done: no refusal comes after this.
    if (refusals_ != nullptr) refusals_->Flush();
    if (options_.limits.events != nullptr && server_ != nullptr) {
      ServerEvent stopped;
      stopped.kind = EventKind::kServerStopped;
      options_.limits.events->OnEvent(stopped);
    }
    if (audit_log_ != nullptr) shutdown_status_ = audit_log_->Close();
  });
  return shutdown_status_;
}

void FedgatherServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

FedgatherServer::~FedgatherServer() {
  // Shutdown's status is the audit log's; a caller that needs it calls
  // Shutdown itself first.
  Shutdown().IgnoreError();
}

}  // namespace fedgather::server
