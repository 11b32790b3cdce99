// AccessPolicy: who may do what on a fedgather server. It declares the
// groups (world size, optional quorum, members and their roles), the server
// admins, and per-identity abuse limits. Everything it does not allow is
// denied. Parsed from YAML (`fedgather-server --policy FILE`); see
// docs/security.md for the format:
//
//   version: 1
//   server_admins: [spiffe://fedgather/ops]    # may reload the policy
//   limits:                                    # defaults for every identity
//     max_contribution_bytes: 8GiB
//     max_tensors_per_contribution: 4096
//     max_concurrent_streams: 32
//     max_groups: 8
//     max_rounds_in_flight: 8
//   identity_limits:                           # per-identity overrides
//     spiffe://fedgather/site-1: {max_concurrent_streams: 4}
//   groups:
//     - name: demo
//       world_size: 2
//       min_quorum: 2                          # optional, 1..world_size
//       round_deadline: 30s                    # optional; see GroupConfig
//       max_rounds_in_flight: 4                # optional; see GroupConfig
//       digest: blake3                         # optional: blake3 | sha256
//       members:
//         spiffe://fedgather/site-1: participant
//         spiffe://fedgather/site-2: participant
//         spiffe://fedgather/dashboard: observer
//         spiffe://fedgather/ops: admin
//
// Roles: a participant joins, contributes and reads its group's status; an
// observer reads status; an admin reads status and aborts rounds. Identities
// are compared byte for byte with the one the certificate carries.
//
// An AccessPolicy is immutable once parsed; every method is const and safe
// to call from any thread.
#ifndef FEDGATHER_SERVER_ACCESS_ACCESS_POLICY_H_
#define FEDGATHER_SERVER_ACCESS_ACCESS_POLICY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/membership/group_config.h"

namespace fedgather::server {

enum class Role { kParticipant, kObserver, kAdmin };
const char* RoleName(Role role);

// What a caller asks to do; each is checked against the policy.
enum class Action {
  kJoin,          // join a group as a participant
  kContribute,    // run a collective in a group
  kReadStatus,    // read a group's status
  kAbortRound,    // end a group's rounds in flight
  kReloadPolicy,  // reload the server's policy and CRL
};
const char* ActionName(Action action);

// Per-identity abuse limits. Reaching one gives RESOURCE_EXHAUSTED to that
// identity only.
struct IdentityLimits {
  int64_t max_contribution_bytes = int64_t{8} << 30;  // payload of one call
  int max_tensors_per_contribution = 4096;
  int max_concurrent_streams = 32;  // session and collective streams open
  int max_groups = 8;               // groups joined (or waiting) at once
  // Collective streams with a round, in every group together (a member runs
  // one collective at a time per group).
  int max_rounds_in_flight = 8;
};

// The fields of IdentityLimits that one `limits` mapping sets.
struct IdentityLimitOverrides {
  std::optional<int64_t> max_contribution_bytes;
  std::optional<int> max_tensors_per_contribution;
  std::optional<int> max_concurrent_streams;
  std::optional<int> max_groups;
  std::optional<int> max_rounds_in_flight;
};

struct GroupPolicy {
  std::string name;
  int world_size = 0;
  int min_quorum = 0;  // 0: every member must contribute
  absl::Duration round_deadline = absl::ZeroDuration();  // 0: the server's
  int max_rounds_in_flight = kDefaultGroupRoundsInFlight;
  DigestAlgorithm digest = DigestAlgorithm::kBlake3;
  std::vector<IpNetwork> peer_networks;  // empty: any peer endpoint
  DataPlanePolicy data_plane = DataPlanePolicy::kAuto;
  std::map<std::string, Role> members;  // identity -> role
};

class AccessPolicy {
 public:
  // Parse reads a policy from `yaml`. INVALID_ARGUMENT names `source` and the
  // offending key, group or identity: unknown keys, a version other than 1,
  // a world size outside 1..kMaxWorldSize, fewer participants than the world
  // size, a quorum outside 1..world_size, an unknown role, an empty identity
  // or one with control characters, a repeated group or identity, and limits
  // that are not positive.
  static absl::StatusOr<AccessPolicy> Parse(absl::string_view yaml,
                                            absl::string_view source);
  // Load reads and parses the file at `path`.
  static absl::StatusOr<AccessPolicy> Load(const std::string& path);

  const std::vector<GroupPolicy>& groups() const { return groups_; }

  // GroupConfigs returns each group's participants, world size and quorum:
  // what the group registry runs.
  std::vector<GroupConfig> GroupConfigs() const;

  // RoleOf returns `identity`'s role in `group`, or nullopt when it has none
  // (or the group does not exist).
  std::optional<Role> RoleOf(absl::string_view identity,
                             absl::string_view group) const;

  // Authorize says whether `identity` may do `action` in `group` (ignored
  // for kReloadPolicy). PERMISSION_DENIED otherwise. A group the identity
  // has no role in and a group that does not exist get the same message
  // (NotAMemberError), so a refusal reveals nothing about other groups; a
  // member whose role does not allow the action is told its role.
  absl::Status Authorize(absl::string_view identity, absl::string_view group,
                         Action action) const;

  // VisibleGroups lists the groups `identity` has a role in, in policy order.
  std::vector<const GroupPolicy*> VisibleGroups(
      absl::string_view identity) const;

  // LimitsFor returns `identity`'s limits: the defaults, overridden field by
  // field by its identity_limits entry.
  IdentityLimits LimitsFor(absl::string_view identity) const;

  // sha256 is the hex SHA-256 of the policy text, for the audit log.
  const std::string& sha256() const { return sha256_; }

 private:
  AccessPolicy() = default;

  std::vector<GroupPolicy> groups_;
  std::vector<std::string> server_admins_;
  IdentityLimits defaults_;
  std::map<std::string, IdentityLimitOverrides, std::less<>> identity_limits_;
  std::string sha256_;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_ACCESS_ACCESS_POLICY_H_
