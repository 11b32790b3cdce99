#include "client/client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/strings/str_cat.h"

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
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      options.server_address, MakeChannelCredentials(options.tls), args);
  return std::unique_ptr<Client>(
      new Client(options.server_address, std::move(channel)));
}

Client::Client(std::string address, std::shared_ptr<grpc::Channel> channel)
    : address_(std::move(address)), channel_(std::move(channel)) {}

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
  std::unique_ptr<Group> group(new Group(channel_, options.group));
  if (absl::Status joined = group->Join(request, options.timeout);
      !joined.ok()) {
    return absl::Status(joined.code(),
                        absl::StrCat("join group '", options.group, "' at ",
                                     address_, ": ", joined.message()));
  }
  return group;
}

}  // namespace fedgather
