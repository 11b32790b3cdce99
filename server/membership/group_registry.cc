#include "server/membership/group_registry.h"

#include "absl/strings/str_cat.h"
#include "server/journal/group_journal.h"

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
      auto group = std::make_unique<GroupState>(config, limits_);
      if (restored_) {
        if (absl::Status restored =
                group->Restore(limits_.clock->Now(), callbacks);
            !restored.ok()) {
          ServerEvent failed;
          failed.kind = EventKind::kGroupRestored;
          failed.group = config.name;
          failed.status = restored;
          DeferEvent(limits_.events, std::move(failed), callbacks);
        }
      }
      groups_[config.name] = std::move(group);
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

absl::Status GroupRegistry::RestoreState(absl::Time now,
                                         PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  restored_ = true;
  if (limits_.state_dir.empty()) return absl::OkStatus();
  for (auto& [name, group] : groups_) {
    if (absl::Status restored = group->Restore(now, callbacks);
        !restored.ok()) {
      return absl::Status(
          restored.code(),
          absl::StrCat("cannot restore group '", name, "' from ",
                       limits_.state_dir, ": ", restored.message()));
    }
  }
  std::set<std::string> kept;
  for (const auto& [name, group] : groups_) kept.insert(name);
  DropGroupStatesExcept(limits_.state_dir, kept);
  return absl::OkStatus();
}

void GroupRegistry::StartResumeGrace(absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (auto& [name, group] : groups_) group->StartResumeGrace(now);
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

std::vector<GroupState::Snapshot> GroupRegistry::Snapshots() const {
  absl::MutexLock lock(&mu_);
  std::vector<GroupState::Snapshot> snapshots;
  for (const auto& [name, group] : groups_) {
    if (active_.count(name) > 0) snapshots.push_back(group->GetSnapshot());
  }
  return snapshots;
}

void GroupRegistry::Drain(const absl::Status& why,
                          PendingCallbacks* callbacks) {
  draining_ = true;
  absl::MutexLock lock(&mu_);
  for (auto& [name, group] : groups_) group->Drain(why, callbacks);
}

void GroupRegistry::FailRounds(absl::StatusCode code, absl::string_view why,
                               PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  for (auto& [name, group] : groups_) group->FailRounds(code, why, callbacks);
}

int GroupRegistry::RoundsInFlight() const {
  absl::MutexLock lock(&mu_);
  int rounds = 0;
  for (const auto& [name, group] : groups_) {
    rounds += group->RoundsInFlight();
  }
  return rounds;
}

void GroupRegistry::CheckTimers(absl::Time now, PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  for (auto& [name, group] : groups_) group->CheckTimers(now, callbacks);
}

}  // namespace fedgather::server
