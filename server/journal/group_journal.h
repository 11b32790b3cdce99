// GroupJournal: one group's durable state under the server's --state-dir,
// in the directory <state-dir>/groups/<group, %-escaped>/:
//   epoch.journal         the group's epochs (a JournalFile):
//                           kFormedWithDigest  payload: the epoch, the
//                                      epoch's digest algorithm ("blake3",
//                                      "sha256"), then each member's
//                                      identity by rank (one C-escaped line
//                                      each)
//                           kFormed    as kFormedWithDigest without the
//                                      algorithm line: a SHA-256 epoch
//                                      (read, never written)
//                           kStarted   rank; payload: the seq it started
//                           kFinished  payload: seq, status code, message
//                           kEnded     payload: the epoch that ended
//   round-<seq>.journal   a round in flight or kept for resumes (Round's
//                         journal, replayed by RestoreRound)
// A new epoch replaces both; an ended epoch leaves only its number, so the
// next one after a restart does not reuse it.
//
// Durability (see docs/decisions.md): kFormed is synced, with the
// directory, before the members learn their ranks; the other group records
// are written but not synced, since a restore also takes each rank's
// progress from the round journals, whose kEnd records Round syncs.
//
// Thread safety: none; GroupState calls it under its lock.
#ifndef FEDGATHER_SERVER_JOURNAL_GROUP_JOURNAL_H_
#define FEDGATHER_SERVER_JOURNAL_GROUP_JOURNAL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/content_hasher.h"
#include "server/journal/journal_file.h"

namespace fedgather::server {

class GroupJournal {
 public:
  // Open uses (creating it, mode 0700) the group's directory under
  // `state_dir`, which must exist.
  static absl::StatusOr<std::unique_ptr<GroupJournal>> Open(
      const std::string& state_dir, const std::string& group);

  // What the last run left.
  struct Saved {
    uint64_t epoch = 0;                   // the last epoch formed (0: none)
    bool formed = false;                  // it had not ended
    std::vector<std::string> identities;  // by rank
    // The epoch's digest algorithm (SHA-256 for a kFormed record).
    DigestAlgorithm digest = DigestAlgorithm::kSha256;
    std::vector<uint64_t> next_seq;             // by rank, from kStarted
    std::map<uint64_t, absl::Status> outcomes;  // kFinished
    std::map<uint64_t, std::string> rounds;     // seq -> round journal path
  };
  // Load reads the group's state (an empty Saved when it has none) and
  // opens epoch.journal to append to it.
  absl::StatusOr<Saved> Load();

  absl::Status Formed(uint64_t epoch, DigestAlgorithm digest,
                      const std::vector<std::string>& identities);
  absl::Status Started(int rank, uint64_t seq);
  absl::Status Finished(uint64_t seq, const absl::Status& outcome);
  // Ended records the end of `epoch` and removes its round journals.
  absl::Status Ended(uint64_t epoch);

  // CreateRoundJournal starts the journal of round `seq`.
  absl::StatusOr<std::unique_ptr<JournalFile>> CreateRoundJournal(
      uint64_t seq) const;
  // DiscardRound removes round `seq`'s journal (best effort).
  void DiscardRound(uint64_t seq) const;

  const std::string& directory() const { return directory_; }

 private:
  explicit GroupJournal(std::string directory)
      : directory_(std::move(directory)) {}
  std::string EpochPath() const;
  std::string RoundPath(uint64_t seq) const;
  void DiscardRounds() const;
  // StartFile replaces epoch.journal with one holding `kind`'s record.
  absl::Status StartFile(uint8_t kind, const std::string& payload);

  const std::string directory_;
  std::unique_ptr<JournalFile> epochs_;  // epoch.journal, once written
};

// DropGroupStatesExcept removes, under `state_dir`, the state of every
// group not in `groups` (best effort).
void DropGroupStatesExcept(const std::string& state_dir,
                           const std::set<std::string>& groups);

// EscapeGroupName makes a group name a safe directory name: letters,
// digits, '-' and '_' stay; every other byte becomes %XX.
std::string EscapeGroupName(const std::string& group);

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_JOURNAL_GROUP_JOURNAL_H_
