// ContributionLedger: who contributes to one round and what each one
// contributed, whatever moves the round's bytes (the star relay's Round
// today; a direct peer-to-peer data plane later, which has no fan-out log).
//
// A rank starts when the round accepts its header (Start). A quorum round
// (0 < min_quorum < world) may close at its quorum deadline to the ranks
// that started (CheckClose, then Close): the others are shut out for good.
// Each contributor ends its upload with its contribution's digest and size
// (End); once every contributor has ended, the round can commit, and the
// commit lists each contributor's digest (AddContributions).
//
// Thread safety: none; the owner calls it under its own lock. It holds no
// bytes and no streams, and calls nothing back: failing the round, and the
// messages that say why, are the owner's part.
#ifndef FEDGATHER_SERVER_CONTROL_CONTRIBUTION_LEDGER_H_
#define FEDGATHER_SERVER_CONTROL_CONTRIBUTION_LEDGER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/digest.h"
#include "fedgather/v1/fedgather.pb.h"

namespace fedgather::server {

class ContributionLedger {
 public:
  // What closing a quorum round now would do (CheckClose).
  enum class Closing {
    kNothingToClose,  // every rank started: the round waits for none
    kBelowQuorum,     // fewer than min_quorum ranks started
    kWithoutRoot,     // a broadcast's root has not started
    kCloses,          // Close would shut out the ranks that have not started
  };

  // `world` ranks; `min_quorum` as RoundOptions::min_quorum (0: none).
  ContributionLedger(int world, int min_quorum);

  // Start records that `rank`'s header was accepted. Not for a rank shut
  // out.
  void Start(int rank);
  bool started(int rank) const { return ranks_[rank].standing == kStarted; }
  bool shut_out(int rank) const { return ranks_[rank].standing == kShutOut; }
  int StartedCount() const;

  // The ranks the round waits for: the world size, until Close.
  int contributors() const { return contributors_; }
  bool closed() const { return contributors_ < world_; }
  // CheckClose tells what closing now would do; `broadcast_root` is a
  // BROADCAST's root (nullopt for other ops). Changes nothing.
  Closing CheckClose(std::optional<int> broadcast_root) const;
  // Close shuts out every rank that has not started (after CheckClose said
  // kCloses) and returns, by rank, who contributes.
  std::vector<bool> Close();

  // End records that `rank` ended its upload of `bytes` with `digest`.
  // Returns true when this End was the last the round waited for (every
  // contributor has now ended); a second End of a rank changes nothing and
  // returns false.
  bool End(int rank, const Digest& digest, int64_t bytes);
  bool ended(int rank) const { return ranks_[rank].digest.has_value(); }
  // The digest `rank` ended with (nullopt before End).
  const std::optional<Digest>& digest(int rank) const {
    return ranks_[rank].digest;
  }
  // The bytes `rank` ended with (0 before End).
  int64_t bytes(int rank) const { return ranks_[rank].bytes; }
  bool AllEnded() const { return ended_ >= contributors_; }

  // AddContributions lists every contributor's rank, identity (from
  // `identities`, by rank), digest and size in `commit`, in rank order.
  // Only once AllEnded.
  void AddContributions(const std::vector<std::string>& identities,
                        v1::Commit* commit) const;

 private:
  enum Standing { kNotStarted, kStarted, kShutOut };
  struct RankEntry {
    Standing standing = kNotStarted;
    std::optional<Digest> digest;
    int64_t bytes = 0;
  };

  const int world_;
  const int min_quorum_;
  std::vector<RankEntry> ranks_;
  int contributors_;
  int ended_ = 0;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_CONTROL_CONTRIBUTION_LEDGER_H_
