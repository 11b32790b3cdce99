#include "client/client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/support/channel_arguments.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/handshake_refusal.h"
#include "common/grpc_status.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace fedgather {

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(
    const ClientOptions& options) {
  if (options.server_address.empty()) {
    return absl::InvalidArgumentError("no server address given");
  }
  if (options.tls.cert_pem.empty() || options.tls.key_pem.empty() ||
      options.tls.ca_pem.empty()) {
    return absl::InvalidArgumentError(
        "mutual TLS needs a certificate, a key and a CA");
  }
  grpc::ChannelArguments args;
  // Each client gets its own connection, even with several in one process.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(16 << 20);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  // A broken session or collective stream must be resumed within the
  // server's resume grace (seconds), counted from when the server is back.
  // gRPC's default reconnect backoff (1 s, then 1.6 times longer each try,
  // gRPC's doc/connection-backoff.md) can leave a restarted server untried
  // for several seconds: on a loaded machine a member missed its grace that
  // way. Try again at least every second.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  if (!options.tls.insecure_plaintext_for_benchmarks) {
    interceptors.push_back(MakeHandshakeRefusalInterceptor(
        options.server_address, options.tls, options.clock));
  }
  std::shared_ptr<grpc::Channel> channel =
      grpc::experimental::CreateCustomChannelWithInterceptors(
          options.server_address, MakeChannelCredentials(options.tls), args,
          std::move(interceptors));
  return std::unique_ptr<Client>(new Client(options.server_address, options.tls,
                                            std::move(channel), options.clock));
}

Client::Client(std::string address, TlsFiles tls,
               std::shared_ptr<grpc::Channel> channel, Clock* clock)
    : address_(std::move(address)),
      tls_(std::move(tls)),
      channel_(std::move(channel)),
      clock_(clock) {}

absl::StatusOr<std::unique_ptr<Group>> Client::Join(
    const JoinOptions& options) {
  if (options.group.empty() || options.world_size < 1) {
    return absl::InvalidArgumentError(
        "a join needs a group name and a world size of at least 1");
  }
  if (options.rank.has_value() &&
      (*options.rank < 0 || *options.rank >= options.world_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", *options.rank, " is out of range for world size ",
                     options.world_size));
  }
  v1::JoinRequest request;
  request.set_group(options.group);
  request.set_world_size(options.world_size);
  if (options.rank.has_value()) request.set_requested_rank(*options.rank);
  std::unique_ptr<PeerOffer> offer;
  if (!options.peer_listen.empty() || !options.peer_advertise.empty()) {
    if (options.peer_listen.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("join group '", options.group,
                       "': a peer advertise address needs a peer listen "
                       "address"));
    }
    if (tls_.insecure_plaintext_for_benchmarks) {
      return absl::InvalidArgumentError(
          absl::StrCat("join group '", options.group,
                       "': peer links need TLS; a plaintext client offers no "
                       "peer endpoint"));
    }
    absl::StatusOr<std::unique_ptr<PeerOffer>> bound =
        PeerOffer::Bind(options.peer_listen, options.peer_advertise);
    if (!bound.ok()) {
      return absl::Status(bound.status().code(),
                          absl::StrCat("join group '", options.group,
                                       "': ", bound.status().message()));
    }
    offer = *std::move(bound);
    request.set_peer_endpoint(offer->endpoint());
  }
  std::unique_ptr<Group> group(new Group(channel_, address_, options.group,
                                         options.resume_grace, clock_));
  if (absl::Status joined =
          group->Join(request, options.timeout, options.connect_timeout,
                      std::move(offer), tls_);
      !joined.ok()) {
    return absl::Status(joined.code(),
                        absl::StrCat("join group '", options.group, "' at ",
                                     address_, ": ", joined.message()));
  }
  return group;
}

namespace {

// CallAdmin runs one unary Admin call with a deadline.
template <typename Request, typename Reply, typename Method>
absl::StatusOr<Reply> CallAdmin(const std::shared_ptr<grpc::Channel>& channel,
                                Method method, const Request& request,
                                absl::Duration timeout) {
  v1::Admin::Stub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(RealDeadlineAfter(timeout));
  Reply reply;
  const grpc::Status status = (stub.*method)(&context, request, &reply);
  if (!status.ok()) return FromGrpcStatus(status);
  return reply;
}

}  // namespace

absl::StatusOr<v1::StatusReply> Client::GetStatus(const std::string& group,
                                                  absl::Duration timeout) {
  v1::StatusRequest request;
  request.set_group(group);
  return CallAdmin<v1::StatusRequest, v1::StatusReply>(
      channel_, &v1::Admin::Stub::GetStatus, request, timeout);
}

absl::StatusOr<v1::AbortRoundReply> Client::AbortRound(
    const std::string& group, const std::string& reason,
    absl::Duration timeout) {
  v1::AbortRoundRequest request;
  request.set_group(group);
  request.set_reason(reason);
  return CallAdmin<v1::AbortRoundRequest, v1::AbortRoundReply>(
      channel_, &v1::Admin::Stub::AbortRound, request, timeout);
}

absl::StatusOr<v1::ReloadPolicyReply> Client::ReloadPolicy(
    absl::Duration timeout) {
  return CallAdmin<v1::ReloadPolicyRequest, v1::ReloadPolicyReply>(
      channel_, &v1::Admin::Stub::ReloadPolicy, v1::ReloadPolicyRequest(),
      timeout);
}

absl::Status Client::CheckHealth(absl::Duration timeout) {
  grpc::health::v1::Health::Stub stub(channel_);
  grpc::ClientContext context;
  context.set_deadline(RealDeadlineAfter(timeout));
  grpc::health::v1::HealthCheckResponse reply;
  const grpc::Status status =
      stub.Check(&context, grpc::health::v1::HealthCheckRequest(), &reply);
  if (!status.ok()) {
    const absl::Status failed = FromGrpcStatus(status);
    return absl::Status(
        failed.code(),
        absl::StrCat("health check of ", address_, ": ", failed.message()));
  }
  if (reply.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(
      absl::StrCat("health check of ", address_, ": the server is ",
                   grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
                       reply.status())));
}

}  // namespace fedgather
