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

namespace fedgather::server {

inline constexpr int kDefaultGroupRoundsInFlight = 4;

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
  std::vector<std::string> members;  // participants, as in certificates
};

inline constexpr int kMaxWorldSize = 4096;

// NotAMemberError is the PERMISSION_DENIED answer both to a non-member and
// to a group that does not exist, so a refusal reveals no group's existence.
absl::Status NotAMemberError(absl::string_view identity,
                             absl::string_view group);

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_MEMBERSHIP_GROUP_CONFIG_H_
