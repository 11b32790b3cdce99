#include "server/access/identity_usage.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace fedgather::server {

const char* LimitName(IdentityUsage::Resource resource) {
  switch (resource) {
    case IdentityUsage::Resource::kStreams:
      return "max_concurrent_streams";
    case IdentityUsage::Resource::kGroups:
      return "max_groups";
    case IdentityUsage::Resource::kRounds:
      return "max_rounds_in_flight";
  }
  return "?";
}

namespace {

// What `resource` is called in a refusal: "... already holds 8 <this>".
const char* Held(IdentityUsage::Resource resource) {
  switch (resource) {
    case IdentityUsage::Resource::kStreams:
      return " open streams";
    case IdentityUsage::Resource::kGroups:
      return " group memberships";
    case IdentityUsage::Resource::kRounds:
      return " rounds in flight";
  }
  return "";
}

}  // namespace

IdentityUsage::Lease::Lease(Lease&& other) noexcept
    : usage_(std::exchange(other.usage_, nullptr)),
      identity_(std::move(other.identity_)),
      resource_(other.resource_) {}

IdentityUsage::Lease& IdentityUsage::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    usage_ = std::exchange(other.usage_, nullptr);
    identity_ = std::move(other.identity_);
    resource_ = other.resource_;
  }
  return *this;
}

void IdentityUsage::Lease::Release() {
  if (usage_ == nullptr) return;
  std::exchange(usage_, nullptr)->Give(identity_, resource_);
}

absl::StatusOr<IdentityUsage::Lease> IdentityUsage::Acquire(
    const std::string& identity, Resource resource, int limit) {
  absl::MutexLock lock(&mu_);
  int& held = counts_[identity].of(resource);
  if (held >= limit) {
    return absl::ResourceExhaustedError(
        absl::StrCat("identity '", identity, "' already holds ", held,
                     Held(resource), ", the limit its policy sets (",
                     LimitName(resource), ": ", limit, ")"));
  }
  ++held;
  return Lease(this, identity, resource);
}

int IdentityUsage::InUse(const std::string& identity, Resource resource) const {
  absl::MutexLock lock(&mu_);
  auto it = counts_.find(identity);
  if (it == counts_.end()) return 0;
  Counts counts = it->second;
  return counts.of(resource);
}

void IdentityUsage::Give(const std::string& identity, Resource resource) {
  absl::MutexLock lock(&mu_);
  auto it = counts_.find(identity);
  if (it == counts_.end()) return;
  --it->second.of(resource);
  if (it->second.streams == 0 && it->second.groups == 0 &&
      it->second.rounds == 0) {
    counts_.erase(it);
  }
}

}  // namespace fedgather::server
