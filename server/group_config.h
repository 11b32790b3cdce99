// GroupConfig: what the group registry runs for one group of the access
// policy: its name, world size, quorum and the identities that may join it
// as participants.
#ifndef FEDGATHER_SERVER_GROUP_CONFIG_H_
#define FEDGATHER_SERVER_GROUP_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace fedgather::server {

struct GroupConfig {
  std::string name;
  int world_size = 0;
  int min_quorum = 0;                // 0: every member must contribute
  std::vector<std::string> members;  // participants, as in certificates
};

inline constexpr int kMaxWorldSize = 4096;

// NotAMemberError is the PERMISSION_DENIED answer both to a non-member and
// to a group that does not exist, so a refusal reveals no group's existence.
absl::Status NotAMemberError(absl::string_view identity,
                             absl::string_view group);

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_GROUP_CONFIG_H_
