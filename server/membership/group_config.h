// GroupConfig: what the group registry runs for one group of the access
// policy: its name, world size, quorum and the identities that may join it
// as participants.
#ifndef FEDGATHER_SERVER_MEMBERSHIP_GROUP_CONFIG_H_
#define FEDGATHER_SERVER_MEMBERSHIP_GROUP_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/content_hasher.h"
#include "common/ip_network.h"

namespace fedgather::server {

inline constexpr int kDefaultGroupRoundsInFlight = 4;

// The policy's choice of data plane for a group's epochs (docs/protocol.md,
// "Data planes"): kAuto runs an epoch direct when every member offered a
// peer endpoint (and the group is not a quorum group), else on the relay;
// kDirect refuses a join that offers no endpoint; kRelay never goes direct.
enum class DataPlanePolicy { kAuto, kRelay, kDirect };

// The policy's word for it: "auto", "relay" or "direct".
const char* DataPlanePolicyName(DataPlanePolicy policy);

struct GroupConfig {
  std::string name;
  int world_size = 0;
  int min_quorum = 0;  // 0: every member must contribute
  // How long a round waits for its ranks, from its first header. Zero: the
  // server's --round-timeout. In a quorum group (0 < min_quorum <
  // world_size) it is the quorum deadline: the ranks that have started by
  // then are the round's contributors, given --round-timeout more to
  // finish; otherwise the round fails when it passes.
  absl::Duration round_deadline = absl::ZeroDuration();
  // Rounds the group runs at once; a header that would start one more ends
  // the epoch with RESOURCE_EXHAUSTED. Members run one collective at a time,
  // so an honest group has at most two (the last rank finishing one while
  // the first starts the next).
  int max_rounds_in_flight = kDefaultGroupRoundsInFlight;
  // The hash each epoch's contributions are named by, fixed when the epoch
  // forms (a policy reload changes the next epoch's).
  DigestAlgorithm digest = DigestAlgorithm::kBlake3;
  // Where members may offer peer endpoints (JoinRequest.peer_endpoint):
  // when not empty, an endpoint must be an IP address in one of these
  // networks; empty: any HOST:PORT.
  std::vector<IpNetwork> peer_networks;
  DataPlanePolicy data_plane = DataPlanePolicy::kAuto;
  std::vector<std::string> members;  // participants, as in certificates
};

inline constexpr int kMaxWorldSize = 4096;

// NotAMemberError is the PERMISSION_DENIED answer both to a non-member and
// to a group that does not exist, so a refusal reveals no group's existence.
absl::Status NotAMemberError(absl::string_view identity,
                             absl::string_view group);

// The longest peer endpoint a member may offer (a DNS name of 253
// characters, brackets, a colon and a port).
inline constexpr size_t kMaxPeerEndpointBytes = 262;

// CheckPeerEndpoint checks the peer endpoint a member offers when it joins
// `config`'s group: "HOST:PORT" with a port 1..65535, at most
// kMaxPeerEndpointBytes, printable ASCII without spaces; and, when the
// group has peer_networks, an IP address in one of them (a name is
// refused: it could resolve anywhere). INVALID_ARGUMENT for a malformed
// endpoint and PERMISSION_DENIED for one outside the networks, each
// naming the group and quoting the endpoint (cut to the limit).
absl::Status CheckPeerEndpoint(const std::string& endpoint,
                               const GroupConfig& config);

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_MEMBERSHIP_GROUP_CONFIG_H_
