#include "server/group_registry.h"

namespace fedgather::server {

GroupRegistry::GroupRegistry(const GroupLimits& limits) : limits_(limits) {}

void GroupRegistry::ApplyPolicy(const std::vector<GroupConfig>& groups,
                                PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  std::set<std::string> listed;
  for (const GroupConfig& config : groups) {
    listed.insert(config.name);
    auto it = groups_.find(config.name);
    if (it == groups_.end()) {
      groups_[config.name] = std::make_unique<GroupState>(config, limits_);
    } else {
      it->second->Reconfigure(config, callbacks);
    }
  }
  for (const std::string& name : active_) {
    if (listed.count(name) > 0) continue;
    GroupState::Snapshot retired = groups_[name]->GetSnapshot();
    retired.config.members.clear();
    groups_[name]->Reconfigure(retired.config, callbacks);
  }
  active_ = std::move(listed);
}

absl::StatusOr<GroupState*> GroupRegistry::Find(
    const std::string& name, const std::string& identity) const {
  absl::MutexLock lock(&mu_);
  auto it = groups_.find(name);
  if (it == groups_.end() || active_.count(name) == 0) {
    return NotAMemberError(identity, name);
  }
  return it->second.get();
}

void GroupRegistry::CheckTimers(absl::Time now, PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  for (auto& [name, group] : groups_) group->CheckTimers(now, callbacks);
}

}  // namespace fedgather::server
