#include "server/membership/round_table.h"

#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/bounded_text.h"

namespace fedgather::server {

std::shared_ptr<Round> RoundTable::InFlight(uint64_t seq) const {
  const auto it = in_flight_.find(seq);
  return it == in_flight_.end() ? nullptr : it->second;
}

std::shared_ptr<Round> RoundTable::Resumable(uint64_t seq) const {
  if (std::shared_ptr<Round> round = InFlight(seq)) return round;
  const auto it = completed_.find(seq);
  return it == completed_.end() ? nullptr : it->second;
}

void RoundTable::AddInFlight(uint64_t seq, std::shared_ptr<Round> round) {
  in_flight_[seq] = std::move(round);
}

void RoundTable::AddCompleted(uint64_t seq, std::shared_ptr<Round> round) {
  completed_[seq] = std::move(round);
}

const absl::Status* RoundTable::Outcome(uint64_t seq) const {
  const auto it = outcomes_.find(seq);
  return it == outcomes_.end() ? nullptr : &it->second;
}

void RoundTable::KeepOutcome(uint64_t seq, const absl::Status& outcome) {
  outcomes_[seq] = BoundStatus(outcome);
  TrimOutcomes();
}

void RoundTable::TrimOutcomes() {
  size_t bytes = 0;
  for (const auto& [seq, outcome] : outcomes_)
    bytes += outcome.message().size();
  while (outcomes_.size() > kKeptOutcomes || bytes > kKeptOutcomeBytes) {
    bytes -= outcomes_.begin()->second.message().size();
    outcomes_.erase(outcomes_.begin());
  }
}

std::vector<uint64_t> RoundTable::Finished(uint64_t seq, bool completed,
                                           bool keep_completed) {
  std::vector<uint64_t> released;
  const auto it = in_flight_.find(seq);
  if (it == in_flight_.end()) return released;
  if (completed && keep_completed) {
    completed_[seq] = it->second;
    while (completed_.size() > kKeptCompletedRounds) {
      released.push_back(completed_.begin()->first);
      completed_.erase(completed_.begin());
    }
  } else {
    released.push_back(seq);
  }
  in_flight_.erase(it);
  return released;
}

void RoundTable::StartEpoch() {
  in_flight_.clear();
  outcomes_.clear();
}

void RoundTable::EndEpoch(uint64_t epoch, std::vector<std::string> identities,
                          const absl::Status& status,
                          PendingCallbacks* callbacks) {
  for (auto& [seq, round] : in_flight_) round->Fail(status, callbacks);
  in_flight_.clear();
  outcomes_.clear();
  ended_ = EndedEpoch{epoch, std::move(identities), std::move(completed_)};
  completed_.clear();
}

absl::StatusOr<std::shared_ptr<Round>> RoundTable::FindEnded(
    absl::string_view group, const std::string& identity,
    const v1::CollectiveHeader& header) const {
  const auto round = ended_.completed.find(header.seq());
  if (!header.resume() || header.epoch() != ended_.epoch ||
      round == ended_.completed.end() ||
      header.rank() >= ended_.identities.size()) {
    return nullptr;
  }
  if (ended_.identities[header.rank()] != identity) {
    return absl::PermissionDeniedError(
        absl::StrCat("group '", group, "' epoch ", ended_.epoch, ": identity '",
                     identity, "' may not resume rank ", header.rank(),
                     ", which was bound to another identity"));
  }
  return round->second;
}

void RoundTable::CheckEnded(absl::Time now, PendingCallbacks* callbacks) {
  for (auto it = ended_.completed.begin(); it != ended_.completed.end();) {
    it->second->CheckDeadline(now, callbacks);
    it = it->second->Settled(now) ? ended_.completed.erase(it) : std::next(it);
  }
}

void RoundTable::CheckDeadlines(absl::Time now, PendingCallbacks* callbacks) {
  for (auto& [seq, round] : in_flight_) round->CheckDeadline(now, callbacks);
  for (auto& [seq, round] : completed_) round->CheckDeadline(now, callbacks);
}

void RoundTable::StartResumeGrace(absl::Time now) {
  for (auto& [seq, round] : in_flight_) round->StartResumeGrace(now);
  for (auto& [seq, round] : completed_) round->StartResumeGrace(now);
}

std::vector<uint64_t> RoundTable::FailInFlight(absl::StatusCode code,
                                               absl::string_view why,
                                               PendingCallbacks* callbacks) {
  std::vector<uint64_t> failed;
  for (auto& [seq, round] : in_flight_) {
    round->Fail(absl::Status(code, absl::StrCat(round->Describe(), " ", why)),
                callbacks);
    failed.push_back(seq);
  }
  return failed;
}

std::vector<Round::Progress> RoundTable::InFlightProgress() const {
  std::vector<Round::Progress> progress;
  for (const auto& [seq, round] : in_flight_) {
    progress.push_back(round->GetProgress());
  }
  return progress;
}

}  // namespace fedgather::server
