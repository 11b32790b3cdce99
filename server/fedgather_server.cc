#include "server/fedgather_server.h"

#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"

namespace fedgather::server {

FedgatherServer::FedgatherServer(ServerOptions options)
    : options_(std::move(options)),
      registry_(options_.groups, options_.limits),
      service_(&registry_, options_.limits.max_chunk_bytes, options_.clock) {}

absl::StatusOr<std::unique_ptr<FedgatherServer>> FedgatherServer::Start(
    ServerOptions options) {
  if (options.groups.empty()) {
    return absl::InvalidArgumentError(
        "no groups are configured (use --groups FILE or --group SPEC)");
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
  std::unique_ptr<FedgatherServer> server(
      new FedgatherServer(std::move(options)));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(server->options_.listen_address,
                           MakeServerCredentials(server->options_.tls),
                           &server->port_);
  builder.RegisterService(&server->service_);
  // A chunk frame is at most max_chunk_bytes plus a few bytes of framing; a
  // header with many tensors may be larger, so leave room for it.
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(server->options_.limits.max_chunk_bytes + (4 << 20)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", server->options_.listen_address,
        " (address in use, or the TLS certificate and key do not match)"));
  }
  server->timers_ = std::thread([s = server.get()] { s->RunTimers(); });
  return server;
}

void FedgatherServer::RunTimers() {
  while (!stop_.WaitForNotificationWithTimeout(options_.timer_period)) {
    PendingCallbacks callbacks;
    registry_.CheckTimers(options_.clock(), &callbacks);
  }
}

void FedgatherServer::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    stop_.Notify();
    if (timers_.joinable()) timers_.join();
    // Cancel open streams at once rather than wait for rounds to finish.
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  });
}

void FedgatherServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

FedgatherServer::~FedgatherServer() { Shutdown(); }

}  // namespace fedgather::server
