#include "server/membership/group_config.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/endpoint.h"

namespace fedgather::server {

absl::Status NotAMemberError(absl::string_view identity,
                             absl::string_view group) {
  return absl::PermissionDeniedError(
      absl::StrCat("identity '", identity, "' may not use group '", group,
                   "' (no such group, or the identity is not a member)"));
}

const char* DataPlanePolicyName(DataPlanePolicy policy) {
  switch (policy) {
    case DataPlanePolicy::kAuto:
      return "auto";
    case DataPlanePolicy::kRelay:
      return "relay";
    case DataPlanePolicy::kDirect:
      return "direct";
  }
  return "auto";
}

absl::Status CheckPeerEndpoint(const std::string& endpoint,
                               const GroupConfig& config) {
  const std::string quoted =
      absl::StrCat("'", endpoint.substr(0, kMaxPeerEndpointBytes),
                   endpoint.size() > kMaxPeerEndpointBytes ? "...'" : "'");
  const auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group '", config.name, "': the peer endpoint ", quoted, " ", why));
  };
  if (endpoint.size() > kMaxPeerEndpointBytes) {
    return invalid(
        absl::StrCat("is longer than ", kMaxPeerEndpointBytes, " bytes"));
  }
  for (char c : endpoint) {
    if (c <= ' ' || c > '~') {
      return invalid("holds a character that is not printable ASCII");
    }
  }
  absl::StatusOr<Endpoint> split = SplitEndpoint(endpoint);
  if (!split.ok() || split->port == 0) {
    return invalid("is not HOST:PORT with a port 1..65535");
  }
  if (config.peer_networks.empty()) return absl::OkStatus();
  for (const IpNetwork& network : config.peer_networks) {
    if (network.Contains(split->host)) return absl::OkStatus();
  }
  std::vector<std::string> networks;
  for (const IpNetwork& network : config.peer_networks) {
    networks.push_back(network.text());
  }
  return absl::PermissionDeniedError(
      absl::StrCat("group '", config.name,
                   "' admits peer endpoints only at IP addresses in ",
                   absl::StrJoin(networks, ", "),
                   " (its policy's peer_networks); ", quoted, " is not one"));
}

}  // namespace fedgather::server
