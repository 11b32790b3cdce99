// RoundTable: one group's rounds, as its GroupState keeps them:
//   - the current epoch's rounds in flight, by seq;
//   - how its finished rounds ended (outcomes), so ranks that come late get
//     the same answer: at most kKeptOutcomes of them, holding at most
//     kKeptOutcomeBytes of messages (the oldest go first);
//   - its most recent completed rounds (kKeptCompletedRounds), kept while
//     sessions may resume, for ranks whose stream broke before the commit;
//   - the completed rounds of the epoch that ended last, with that epoch's
//     members, kept for their own ranks' resumes until each is settled.
// It holds rounds and statuses only. Membership, epochs and the group's
// journal stay with GroupState, which tells the table what happened; where
// a round's journal is no longer needed, the table returns its seq.
//
// Thread safety: none; GroupState uses it under its own mutex. Calls into
// rounds take their locks after it (lock order: group, then round).
#ifndef FEDGATHER_SERVER_MEMBERSHIP_ROUND_TABLE_H_
#define FEDGATHER_SERVER_MEMBERSHIP_ROUND_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "fedgather/v1/fedgather.pb.h"
#include "server/events/pending_callbacks.h"
#include "server/relay/round.h"

namespace fedgather::server {

class RoundTable {
 public:
  static constexpr size_t kKeptOutcomes = 1024;
  static constexpr size_t kKeptOutcomeBytes = size_t{1} << 20;
  static constexpr size_t kKeptCompletedRounds = 4;

  // The current epoch's round in flight with `seq`, or null.
  std::shared_ptr<Round> InFlight(uint64_t seq) const;
  // A round a resuming stream of the current epoch may name: in flight or
  // kept completed; null when neither.
  std::shared_ptr<Round> Resumable(uint64_t seq) const;
  void AddInFlight(uint64_t seq, std::shared_ptr<Round> round);
  // AddCompleted keeps a completed round (restored from its journal) for
  // resumes.
  void AddCompleted(uint64_t seq, std::shared_ptr<Round> round);
  int InFlightCount() const { return static_cast<int>(in_flight_.size()); }
  // The current epoch's rounds in flight, by seq.
  const std::map<uint64_t, std::shared_ptr<Round>>& in_flight() const {
    return in_flight_;
  }
  int CompletedCount() const { return static_cast<int>(completed_.size()); }

  // How round `seq` of the current epoch ended; null when unknown.
  const absl::Status* Outcome(uint64_t seq) const;
  // KeepOutcome keeps `outcome`, bounded (BoundStatus), as how `seq` ended,
  // and drops the oldest outcomes past the bounds.
  void KeepOutcome(uint64_t seq, const absl::Status& outcome);

  // Finished takes round `seq` out of the rounds in flight (nothing when it
  // is not there). A completed round is kept for resumes when
  // `keep_completed`, pushing the oldest kept one out past
  // kKeptCompletedRounds. Returns the seqs of the rounds it let go of, whose
  // journals are no longer needed.
  std::vector<uint64_t> Finished(uint64_t seq, bool completed,
                                 bool keep_completed);

  // StartEpoch forgets the rounds in flight and the outcomes of the epoch
  // before (EndEpoch has already let go of them).
  void StartEpoch();
  // EndEpoch fails every round in flight with `status`, forgets the
  // outcomes, and keeps the completed rounds for the ranks of `epoch`
  // (`identities`, by rank) until each is settled, in place of those of the
  // epoch that ended before.
  void EndEpoch(uint64_t epoch, std::vector<std::string> identities,
                const absl::Status& status, PendingCallbacks* callbacks);
  // FindEnded is the completed round a resuming `header` of the epoch that
  // ended last names, when `identity` held its rank then; null when that
  // epoch has no such round (or the header does not resume);
  // PERMISSION_DENIED naming `group` when the rank was another identity's.
  absl::StatusOr<std::shared_ptr<Round>> FindEnded(
      absl::string_view group, const std::string& identity,
      const v1::CollectiveHeader& header) const;

  // CheckEnded checks the deadlines of the ended epoch's completed rounds
  // and drops the settled ones.
  void CheckEnded(absl::Time now, PendingCallbacks* callbacks);
  // CheckDeadlines checks the current epoch's rounds in flight and kept
  // completed rounds against `now`.
  void CheckDeadlines(absl::Time now, PendingCallbacks* callbacks);
  // StartResumeGrace restarts the grace of detached ranks of the current
  // epoch's rounds from `now` (Round::StartResumeGrace).
  void StartResumeGrace(absl::Time now);
  // FailInFlight fails every round in flight with `code` and
  // "<round> <why>", and returns their seqs.
  std::vector<uint64_t> FailInFlight(absl::StatusCode code,
                                     absl::string_view why,
                                     PendingCallbacks* callbacks);
  // The progress of every round in flight, by seq.
  std::vector<Round::Progress> InFlightProgress() const;

 private:
  void TrimOutcomes();

  std::map<uint64_t, std::shared_ptr<Round>> in_flight_;
  std::map<uint64_t, absl::Status> outcomes_;
  std::map<uint64_t, std::shared_ptr<Round>> completed_;
  struct EndedEpoch {
    uint64_t epoch = 0;
    std::vector<std::string> identities;
    std::map<uint64_t, std::shared_ptr<Round>> completed;
  };
  EndedEpoch ended_;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_MEMBERSHIP_ROUND_TABLE_H_
