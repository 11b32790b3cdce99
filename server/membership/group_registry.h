// GroupRegistry: the groups a server runs, by name, as the access policy
// declares them. A policy reload (ApplyPolicy) adds groups, reconfigures the
// ones that stay, and retires the ones it drops; GroupState objects live as
// long as the registry, so streams may keep pointers to them.
//
// Thread safety: thread-safe. mu_ guards the map; each group's state has its
// own lock (lock order: registry, then group).
#ifndef FEDGATHER_SERVER_MEMBERSHIP_GROUP_REGISTRY_H_
#define FEDGATHER_SERVER_MEMBERSHIP_GROUP_REGISTRY_H_

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/membership/group_config.h"
#include "server/membership/group_state.h"

namespace fedgather::server {

class GroupRegistry {
 public:
  explicit GroupRegistry(const GroupLimits& limits);

  // ApplyPolicy makes `groups` the registry's groups: new ones are created,
  // existing ones are reconfigured (GroupState::Reconfigure: rounds in flight
  // carry on) and those not listed are retired: they refuse joins and
  // collectives, while a formed epoch's rounds in flight still complete.
  void ApplyPolicy(const std::vector<GroupConfig>& groups,
                   PendingCallbacks* callbacks);

  // Find returns the group named `name`, or PERMISSION_DENIED that reveals
  // nothing about which groups exist (the same answer a non-member gets).
  absl::StatusOr<GroupState*> Find(const std::string& name,
                                   const std::string& identity) const;

  // RestoreState brings back, once at startup, what the groups the policy
  // lists left in limits.state_dir (GroupState::Restore), and removes the
  // state of groups it no longer lists. Groups a later reload adds are
  // restored as they are created; if that fails, the group runs without
  // durable state and a kGroupRestored event carries the error. Errors:
  // the first group's that could not be restored (the server should not
  // start). Nothing to do without a state_dir.
  absl::Status RestoreState(absl::Time now, PendingCallbacks* callbacks);
  // StartResumeGrace tells every group that the server listens as of `now`
  // (GroupState::StartResumeGrace): restored members and ranks have their
  // whole grace from then.
  void StartResumeGrace(absl::Time now);

  // events is where refusals are reported; may be null.
  EventSink* events() const { return limits_.events; }
  // metrics counts streams and bytes; may be null.
  ServerCounters* metrics() const { return limits_.metrics; }

  // Snapshots describes every group the policy lists, by name.
  std::vector<GroupState::Snapshot> Snapshots() const;

  // Drain prepares every group for a shutdown (GroupState::Drain: with a
  // state_dir their epochs go on, for members to resume after the restart)
  // and makes draining() true, after which new joins are refused (resumes of
  // a formed epoch are not). FailRounds fails every round in flight
  // (GroupState::FailRounds). RoundsInFlight counts them.
  void Drain(const absl::Status& why, PendingCallbacks* callbacks);
  bool draining() const { return draining_.load(); }
  void FailRounds(absl::StatusCode code, absl::string_view why,
                  PendingCallbacks* callbacks);
  int RoundsInFlight() const;

  // CheckTimers runs GroupState::CheckTimers on every group.
  void CheckTimers(absl::Time now, PendingCallbacks* callbacks);

 private:
  const GroupLimits limits_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<GroupState>> groups_
      ABSL_GUARDED_BY(mu_);
  std::set<std::string> active_ ABSL_GUARDED_BY(mu_);  // in the policy
  bool restored_ ABSL_GUARDED_BY(mu_) = false;         // RestoreState ran
  std::atomic<bool> draining_{false};
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_MEMBERSHIP_GROUP_REGISTRY_H_
