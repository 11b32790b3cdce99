// GroupRegistry: the groups a server knows, by name. The set of groups is
// fixed when the registry is built; each group's state is thread-safe.
#ifndef FEDGATHER_SERVER_GROUP_REGISTRY_H_
#define FEDGATHER_SERVER_GROUP_REGISTRY_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/group_config.h"
#include "server/group_state.h"

namespace fedgather::server {

class GroupRegistry {
 public:
  GroupRegistry(const std::vector<GroupConfig>& groups,
                const GroupLimits& limits);

  // Find returns the group named `name`, or PERMISSION_DENIED that reveals
  // nothing about which groups exist (the same answer a non-member gets).
  absl::StatusOr<GroupState*> Find(const std::string& name,
                                   const std::string& identity) const;

  // events is where refusals are reported; may be null.
  EventSink* events() const { return events_; }

  // CheckTimers runs GroupState::CheckTimers on every group.
  void CheckTimers(absl::Time now, PendingCallbacks* callbacks);

 private:
  std::map<std::string, std::unique_ptr<GroupState>> groups_;
  EventSink* const events_;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_GROUP_REGISTRY_H_
