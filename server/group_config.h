// GroupConfig: a group the server knows from its groups file or flags: its
// name, world size and the identities allowed to join it.
#ifndef FEDGATHER_SERVER_GROUP_CONFIG_H_
#define FEDGATHER_SERVER_GROUP_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fedgather::server {

struct GroupConfig {
  std::string name;
  int world_size = 0;
  std::vector<std::string> members;  // allowed identities, as in certificates
};

// ParseGroupsYaml parses a groups file:
//   groups:
//     - name: demo
//       world_size: 4
//       members: [spiffe://fedgather/site-1, ...]
// INVALID_ARGUMENT names `source` and the offending group or field: unknown
// keys, a missing name, a world size outside 1..kMaxWorldSize, fewer members
// than the world size, duplicate groups or members.
absl::StatusOr<std::vector<GroupConfig>> ParseGroupsYaml(
    absl::string_view yaml, absl::string_view source);

// LoadGroupsFile reads and parses `path`.
absl::StatusOr<std::vector<GroupConfig>> LoadGroupsFile(
    const std::string& path);

// ParseGroupFlag parses "NAME:WORLD_SIZE=ID1,ID2,..." (the --group flag).
absl::StatusOr<GroupConfig> ParseGroupFlag(absl::string_view flag);

inline constexpr int kMaxWorldSize = 4096;

// NotAMemberError is the PERMISSION_DENIED answer both to a non-member and
// to a group that does not exist, so a refusal reveals no group's existence.
absl::Status NotAMemberError(absl::string_view identity,
                             absl::string_view group);

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_GROUP_CONFIG_H_
