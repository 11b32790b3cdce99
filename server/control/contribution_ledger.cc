#include "server/control/contribution_ledger.h"

namespace fedgather::server {

ContributionLedger::ContributionLedger(int world, int min_quorum)
    : world_(world),
      min_quorum_(min_quorum),
      ranks_(world),
      contributors_(world) {}

void ContributionLedger::Start(int rank) {
  if (ranks_[rank].standing == kNotStarted) ranks_[rank].standing = kStarted;
}

int ContributionLedger::StartedCount() const {
  int count = 0;
  for (const RankEntry& entry : ranks_) count += entry.standing == kStarted;
  return count;
}

ContributionLedger::Closing ContributionLedger::CheckClose(
    std::optional<int> broadcast_root) const {
  const int count = StartedCount();
  if (count == world_) return Closing::kNothingToClose;
  if (count < min_quorum_) return Closing::kBelowQuorum;
  if (broadcast_root.has_value() && !started(*broadcast_root)) {
    return Closing::kWithoutRoot;
  }
  return Closing::kCloses;
}

std::vector<bool> ContributionLedger::Close() {
  std::vector<bool> contributes(world_);
  contributors_ = 0;
  for (int r = 0; r < world_; ++r) {
    if (ranks_[r].standing == kNotStarted) ranks_[r].standing = kShutOut;
    contributes[r] = ranks_[r].standing == kStarted;
    contributors_ += contributes[r];
  }
  return contributes;
}

bool ContributionLedger::End(int rank, const Digest& digest, int64_t bytes) {
  RankEntry& entry = ranks_[rank];
  if (entry.digest.has_value()) return false;
  entry.digest = digest;
  entry.bytes = bytes;
  ++ended_;
  return AllEnded();
}

void ContributionLedger::AddContributions(
    const std::vector<std::string>& identities, v1::Commit* commit) const {
  for (int r = 0; r < world_; ++r) {
    if (ranks_[r].standing == kShutOut || !ranks_[r].digest.has_value()) {
      continue;
    }
    v1::RankDigest* digest = commit->add_contributions();
    digest->set_rank(static_cast<uint32_t>(r));
    digest->set_identity(identities[r]);
    digest->set_digest(DigestBytes(*ranks_[r].digest));
    digest->set_bytes(static_cast<uint64_t>(ranks_[r].bytes));
  }
}

}  // namespace fedgather::server
