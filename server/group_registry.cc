#include "server/group_registry.h"

namespace fedgather::server {

GroupRegistry::GroupRegistry(const std::vector<GroupConfig>& groups,
                             const GroupLimits& limits)
    : events_(limits.events) {
  for (const GroupConfig& config : groups) {
    groups_[config.name] = std::make_unique<GroupState>(config, limits);
  }
}

absl::StatusOr<GroupState*> GroupRegistry::Find(
    const std::string& name, const std::string& identity) const {
  auto it = groups_.find(name);
  if (it == groups_.end()) {
    return NotAMemberError(identity, name);
  }
  return it->second.get();
}

void GroupRegistry::CheckTimers(absl::Time now, PendingCallbacks* callbacks) {
  for (auto& [name, group] : groups_) group->CheckTimers(now, callbacks);
}

}  // namespace fedgather::server
