// IdentityUsage: how many streams, group memberships and rounds in flight
// each identity holds right now, so per-identity limits can refuse the next
// one. A Lease stands for one unit held; it gives the unit back when destroyed.
// Counts are per identity, so one identity reaching its limit never affects
// another.
//
// Thread safety: thread-safe; every method takes the mutex briefly. A Lease
// may be destroyed on any thread, and must not outlive its IdentityUsage.
#ifndef FEDGATHER_SERVER_ACCESS_IDENTITY_USAGE_H_
#define FEDGATHER_SERVER_ACCESS_IDENTITY_USAGE_H_

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace fedgather::server {

class IdentityUsage {
 public:
  enum class Resource { kStreams, kGroups, kRounds };

  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { Release(); }
    // Release gives the unit back now; later calls do nothing.
    void Release();

   private:
    friend class IdentityUsage;
    Lease(IdentityUsage* usage, std::string identity, Resource resource)
        : usage_(usage), identity_(std::move(identity)), resource_(resource) {}
    IdentityUsage* usage_ = nullptr;
    std::string identity_;
    Resource resource_ = Resource::kStreams;
  };

  IdentityUsage() = default;
  IdentityUsage(const IdentityUsage&) = delete;
  IdentityUsage& operator=(const IdentityUsage&) = delete;

  // Acquire takes one unit of `resource` for `identity` when it holds fewer
  // than `limit`; else RESOURCE_EXHAUSTED naming the identity, the count and
  // the policy limit (LimitName).
  absl::StatusOr<Lease> Acquire(const std::string& identity, Resource resource,
                                int limit);

  // InUse is what `identity` holds of `resource` now.
  int InUse(const std::string& identity, Resource resource) const;

 private:
  struct Counts {
    int streams = 0;
    int groups = 0;
    int rounds = 0;
    int& of(Resource r) {
      return r == Resource::kStreams  ? streams
             : r == Resource::kGroups ? groups
                                      : rounds;
    }
  };
  void Give(const std::string& identity, Resource resource);

  mutable absl::Mutex mu_;
  std::map<std::string, Counts> counts_ ABSL_GUARDED_BY(mu_);
};

// LimitName is the policy key of the limit on `resource`.
const char* LimitName(IdentityUsage::Resource resource);

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_ACCESS_IDENTITY_USAGE_H_
