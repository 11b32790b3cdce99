#include "server/membership/group_state.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/bounded_text.h"
#include "common/data_plane_name.h"
#include "server/relay/journal_recorder.h"
#include "server/relay/round_restore.h"

namespace fedgather::server {
namespace {

// How long a direct candidate waits for every member's peer links, and
// what a failed report may add to the reason.
constexpr absl::Duration kLinkReportTimeout = absl::Seconds(20);
constexpr size_t kMaxLinkReportBytes = 1024;

// ReportedStatus is what a member reported (a google.rpc.Code, UNKNOWN for
// any other number, and its words, bounded), after `prefix`.
absl::Status ReportedStatus(int32_t code, const std::string& message,
                            absl::string_view prefix) {
  const int known = code > 0 && code <= 16
                        ? code
                        : static_cast<int>(absl::StatusCode::kUnknown);
  return absl::Status(
      static_cast<absl::StatusCode>(known),
      absl::StrCat(prefix, TruncateText(message, kMaxLinkReportBytes)));
}

}  // namespace

GroupState::GroupState(GroupConfig config, const GroupLimits& limits)
    : name_(config.name), limits_(limits), config_(std::move(config)) {}

absl::Status GroupState::Restore(absl::Time now, PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  if (limits_.state_dir.empty()) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<GroupJournal>> opened =
      GroupJournal::Open(limits_.state_dir, name_);
  if (!opened.ok()) return opened.status();
  journal_ = *std::move(opened);
  absl::StatusOr<GroupJournal::Saved> saved = journal_->Load();
  if (!saved.ok()) return saved.status();
  epoch_ = saved->epoch;
  if (!saved->formed) return absl::OkStatus();
  formed_ = true;
  digest_ = saved->digest;
  // The journal keeps no peer endpoints: a restored epoch carries on over
  // the relay, and its members learn it from the Joined of their resume.
  data_plane_reason_ =
      "the epoch was restored after a server restart, without its peer "
      "endpoints";
  for (size_t r = 0; r < saved->identities.size(); ++r) {
    Member member;
    member.identity = saved->identities[r];
    member.last_heartbeat = now;
    member.next_seq = saved->next_seq[r];
    member.disconnected = true;
    member.disconnected_at = now;
    member.lost_why = "the server restarted";
    members_.push_back(std::move(member));
  }
  const bool same_members =
      static_cast<int>(members_.size()) == config_.world_size &&
      std::all_of(members_.begin(), members_.end(),
                  [&](const Member& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                    return std::find(config_.members.begin(),
                                     config_.members.end(),
                                     m.identity) != config_.members.end();
                  });
  if (!same_members) {
    EndEpochLocked(absl::AbortedError(absl::StrCat(
                       Describe(),
                       " was not restored: the policy changed its members "
                       "while the server was down; join again")),
                   nullptr, callbacks);
    return absl::OkStatus();
  }
  // A journal written before failure messages were bounded may hold big
  // ones.
  for (const auto& [seq, outcome] : saved->outcomes) {
    rounds_.KeepOutcome(seq, outcome);
  }
  int64_t journal_bytes = 0;
  for (const auto& [seq, path] : saved->rounds) {
    if (const absl::Status* outcome = rounds_.Outcome(seq);
        outcome != nullptr && !outcome->ok()) {
      journal_->DiscardRound(seq);  // it failed before the restart
      continue;
    }
    absl::StatusOr<RestoredRound> restored =
        RestoreRound(RoundOptionsLocked(seq, now), path, now);
    if (!restored.ok()) return restored.status();
    journal_bytes += restored->journal_bytes;
    for (int r : restored->round->GetProgress().started) {
      members_[r].next_seq = std::max(members_[r].next_seq, seq + 1);
    }
    if (restored->round->Complete()) {
      rounds_.AddCompleted(seq, restored->round);
    } else {
      rounds_.AddInFlight(seq, restored->round);
    }
  }
  ServerEvent event;
  event.kind = EventKind::kGroupRestored;
  event.group = name_;
  event.epoch = epoch_;
  event.bytes = journal_bytes;
  event.details = {{"rounds_in_flight", absl::StrCat(rounds_.InFlightCount())},
                   {"rounds_completed", absl::StrCat(rounds_.CompletedCount())},
                   {"state_dir", journal_->directory()}};
  DeferEvent(limits_.events, std::move(event), callbacks);
  return absl::OkStatus();
}

std::string GroupState::Describe() const {
  return absl::StrCat("group '", name_, "' epoch ", epoch_);
}

void GroupState::Emit(EventKind kind, int rank, const std::string& identity,
                      const std::string& peer, const absl::Status& status,
                      PendingCallbacks* callbacks) const {
  ServerEvent event;
  event.kind = kind;
  event.group = name_;
  event.epoch = epoch_;
  event.rank = rank;
  event.identity = identity;
  event.peer = peer;
  event.status = status;
  DeferEvent(limits_.events, std::move(event), callbacks);
}

absl::Status GroupState::Join(const std::string& identity,
                              const std::string& peer,
                              const v1::JoinRequest& request,
                              std::shared_ptr<SessionStream> session,
                              absl::Time now, PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  const std::string group = absl::StrCat("group '", name_, "'");
  if (std::find(config_.members.begin(), config_.members.end(), identity) ==
      config_.members.end()) {
    return NotAMemberError(identity, name_);
  }
  if (static_cast<int>(request.world_size()) != config_.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(group, " has world size ", config_.world_size,
                     "; the join asked for ", request.world_size()));
  }
  int requested = -1;
  if (request.has_requested_rank()) {
    if (request.requested_rank() >= static_cast<uint32_t>(config_.world_size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", request.requested_rank(), " is out of range for ", group,
          " of world size ", config_.world_size));
    }
    requested = static_cast<int>(request.requested_rank());
  }
  if (request.resume_epoch() == 0) {
    if (absl::Status admitted = AdmissionLocked(); !admitted.ok()) {
      return admitted;
    }
  }
  if (request.resume_epoch() != 0) {
    return ResumeLocked(identity, peer, request, std::move(session), now,
                        callbacks);
  }
  if (!request.peer_endpoint().empty()) {
    if (absl::Status offered =
            CheckPeerEndpoint(request.peer_endpoint(), config_);
        !offered.ok()) {
      return offered;
    }
  } else if (config_.data_plane == DataPlanePolicy::kDirect) {
    return absl::FailedPreconditionError(absl::StrCat(
        group,
        " runs the direct data plane (its policy's data_plane: direct), so "
        "every member must offer a peer endpoint (JoinRequest.peer_endpoint, "
        "fedgather join --peer-listen)"));
  }
  if (formed_) {
    const auto member =
        std::find_if(members_.begin(), members_.end(),
                     [&](const Member& m) { return m.identity == identity; });
    if (member == members_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat(Describe(), " is formed with all ", members_.size(),
                       " members; join again after it ends"));
    }
    EndEpochLocked(
        absl::UnavailableError(absl::StrCat(
            Describe(), ": rank ", member - members_.begin(), " (", identity,
            ") joined again, so the epoch ended; join again")),
        nullptr, callbacks);
  }
  for (const Waiting& w : waiting_) {
    if (w.identity == identity) {
      return absl::AlreadyExistsError(absl::StrCat(
          "identity '", identity, "' is already waiting to join ", group));
    }
    if (requested >= 0 && w.requested_rank == requested) {
      return absl::AlreadyExistsError(
          absl::StrCat("rank ", requested, " of ", group,
                       " is already taken by '", w.identity, "'"));
    }
  }
  waiting_.push_back(Waiting{identity, peer, requested, request.peer_endpoint(),
                             session, session.get(), now});
  Emit(EventKind::kMemberJoined, requested, identity, peer, absl::OkStatus(),
       callbacks);
  if (static_cast<int>(waiting_.size()) == config_.world_size) {
    FormLocked(now, callbacks);
  }
  return absl::OkStatus();
}

v1::Joined GroupState::JoinedLocked(int rank) const {
  v1::Joined joined;
  joined.set_group(name_);
  joined.set_epoch(epoch_);
  joined.set_rank(static_cast<uint32_t>(rank));
  joined.set_world_size(static_cast<uint32_t>(members_.size()));
  joined.set_heartbeat_interval_ms(
      absl::ToInt64Milliseconds(limits_.heartbeat_interval));
  joined.set_heartbeat_timeout_ms(
      absl::ToInt64Milliseconds(limits_.heartbeat_timeout));
  joined.set_max_chunk_bytes(static_cast<uint32_t>(limits_.max_chunk_bytes));
  joined.set_digest_algorithm(DigestAlgorithmToProto(digest_));
  joined.set_data_plane(data_plane_);
  joined.set_data_plane_reason(data_plane_reason_);
  for (size_t r = 0; r < members_.size(); ++r) {
    v1::Member* member = joined.add_members();
    member->set_rank(static_cast<uint32_t>(r));
    member->set_identity(members_[r].identity);
    member->set_peer_endpoint(members_[r].peer_endpoint);
  }
  return joined;
}

absl::Status GroupState::ResumeLocked(const std::string& identity,
                                      const std::string& peer,
                                      const v1::JoinRequest& request,
                                      std::shared_ptr<SessionStream> session,
                                      absl::Time now,
                                      PendingCallbacks* callbacks) {
  if (!formed_ || request.resume_epoch() != epoch_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group '", name_, "' epoch ", request.resume_epoch(),
        " cannot be resumed: ",
        formed_ ? absl::StrCat("the group is at epoch ", epoch_)
                : (ended_status_.ok() ? std::string("it ended")
                                      : std::string(ended_status_.message())),
        "; join again"));
  }
  // The epoch's ranks, not the policy's world size (a reload may have
  // changed that since the epoch formed).
  if (!request.has_requested_rank() ||
      request.requested_rank() >= members_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(), ": identity '", identity, "' resumes ",
                     request.has_requested_rank()
                         ? absl::StrCat("rank ", request.requested_rank())
                         : std::string("without naming its rank"),
                     ", but the epoch has ranks 0 to ", members_.size() - 1));
  }
  const int rank = static_cast<int>(request.requested_rank());
  if (members_[rank].identity != identity) {
    return absl::PermissionDeniedError(absl::StrCat(
        Describe(), ": identity '", identity, "' may not resume rank ", rank,
        ", which is bound to another identity"));
  }
  Member& member = members_[rank];
  member.peer = peer;
  member.session = session;
  member.session_key = session.get();
  member.last_heartbeat = now;
  member.disconnected = false;
  std::weak_ptr<SessionStream> weak = session;
  callbacks->Add([weak, joined = JoinedLocked(rank)] {
    if (auto s = weak.lock()) s->SendJoined(joined);
  });
  Emit(EventKind::kMemberJoined, rank, identity, peer, absl::OkStatus(),
       callbacks);
  return absl::OkStatus();
}

void GroupState::FormLocked(absl::Time now, PendingCallbacks* callbacks) {
  const int world = config_.world_size;
  std::vector<const Waiting*> by_rank(world, nullptr);
  std::vector<const Waiting*> unranked;
  for (const Waiting& w : waiting_) {
    if (w.requested_rank >= 0) {
      by_rank[w.requested_rank] = &w;
    } else {
      unranked.push_back(&w);
    }
  }
  std::sort(unranked.begin(), unranked.end(),
            [](const Waiting* a, const Waiting* b) {
              return a->identity < b->identity;
            });
  auto next = unranked.begin();
  for (const Waiting*& slot : by_rank) {
    if (slot == nullptr) slot = *next++;
  }
  ++epoch_;
  formed_ = true;
  digest_ = config_.digest;
  ended_status_ = absl::OkStatus();
  members_.clear();
  rounds_.StartEpoch();
  for (const Waiting* w : by_rank) {
    Member member;
    member.identity = w->identity;
    member.peer = w->peer;
    member.peer_endpoint = w->peer_endpoint;
    member.session = w->session;
    member.session_key = w->session_key;
    member.last_heartbeat = now;
    members_.push_back(std::move(member));
  }
  waiting_.clear();
  ChooseDataPlaneLocked(now);
  if (journal_ != nullptr) {
    std::vector<std::string> identities;
    for (const Member& m : members_) identities.push_back(m.identity);
    if (absl::Status written = journal_->Formed(epoch_, digest_, identities);
        !written.ok()) {
      EndEpochLocked(StateErrorLocked(written), nullptr, callbacks);
      return;
    }
  }

  for (int r = 0; r < world; ++r) {
    const v1::Joined joined = JoinedLocked(r);
    std::weak_ptr<SessionStream> weak = members_[r].session;
    callbacks->Add([weak, joined] {
      if (auto session = weak.lock()) session->SendJoined(joined);
    });
  }
  ServerEvent formed;
  formed.kind = EventKind::kGroupFormed;
  formed.group = name_;
  formed.epoch = epoch_;
  formed.digest_algorithm = DigestAlgorithmName(digest_);
  for (int r = 0; r < world; ++r) {
    formed.details.emplace_back(absl::StrCat("rank_", r), members_[r].identity);
  }
  formed.details.emplace_back("data_plane", DataPlaneName(data_plane_));
  formed.details.emplace_back("data_plane_reason", data_plane_reason_);
  DeferEvent(limits_.events, std::move(formed), callbacks);
}

void GroupState::ChooseDataPlaneLocked(absl::Time now) {
  data_plane_ = v1::DATA_PLANE_RELAY;
  links_pending_ = false;
  const int world = static_cast<int>(members_.size());
  if (config_.data_plane == DataPlanePolicy::kRelay) {
    data_plane_reason_ = "the group's policy sets data_plane: relay";
    return;
  }
  if (config_.min_quorum > 0 && config_.min_quorum < world) {
    data_plane_reason_ =
        absl::StrCat("quorum rounds (min_quorum ", config_.min_quorum, " of ",
                     world, ") run on the relay");
    return;
  }
  for (int r = 0; r < world; ++r) {
    if (members_[r].peer_endpoint.empty()) {
      data_plane_reason_ = absl::StrCat("rank ", r, " (", members_[r].identity,
                                        ") offered no peer endpoint");
      return;
    }
  }
  // A candidate: the members make their peer links and report them.
  data_plane_ = v1::DATA_PLANE_DIRECT;
  data_plane_reason_ =
      absl::StrCat("every member offered a peer endpoint (data_plane: ",
                   DataPlanePolicyName(config_.data_plane),
                   "); waiting for the members' peer links");
  links_pending_ = true;
  link_reports_.assign(world, std::nullopt);
  links_deadline_ = now + kLinkReportTimeout;
}

absl::Status GroupState::ReportPeerLinks(const SessionStream* session,
                                         const v1::PeerLinks& report,
                                         PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  const int rank = FormedRankLocked(session);
  if (rank < 0) {
    return absl::FailedPreconditionError(
        "PeerLinks may be sent only by a member of a formed epoch");
  }
  // Late (the plane was settled without it) or repeated: nothing to do.
  if (!links_pending_ || link_reports_[rank].has_value()) {
    return absl::OkStatus();
  }
  const absl::Status links =
      report.code() == 0 ? absl::OkStatus()
                         : ReportedStatus(report.code(), report.message(), "");
  if (links.code() == absl::StatusCode::kUnauthenticated ||
      links.code() == absl::StatusCode::kPermissionDenied) {
    // A peer that is not who the rendezvous named: a denial, audited.
    PeerLinkDenialLocked(rank, links, callbacks);
  }
  link_reports_[rank] = links;
  for (const std::optional<absl::Status>& r : link_reports_) {
    if (!r.has_value()) return absl::OkStatus();
  }
  std::string why_not;
  for (size_t r = 0; r < link_reports_.size() && why_not.empty(); ++r) {
    if (link_reports_[r]->ok()) continue;
    why_not = absl::StrCat("rank ", r, " (", members_[r].identity,
                           ") could not make its peer links: ",
                           absl::StatusCodeToString(link_reports_[r]->code()),
                           ": ", link_reports_[r]->message());
  }
  SettleDataPlaneLocked(why_not, callbacks);
  return absl::OkStatus();
}

absl::Status GroupState::ReportPeerRefusal(const SessionStream* session,
                                           const v1::PeerRefusal& refusal,
                                           PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  const int rank = FormedRankLocked(session);
  if (rank < 0) {
    return absl::FailedPreconditionError(
        "PeerRefusal may be sent only by a member of a formed epoch");
  }
  Member& member = members_[rank];
  if (member.refusals_reported >= kMaxPeerRefusalReports) {
    return absl::OkStatus();
  }
  ++member.refusals_reported;
  PeerLinkDenialLocked(
      rank,
      ReportedStatus(
          refusal.code(), refusal.message(),
          absl::StrCat("rank ", rank, "'s peer listener refused a link: ")),
      callbacks);
  return absl::OkStatus();
}

int GroupState::FormedRankLocked(const SessionStream* session) const {
  if (!formed_) return -1;
  for (size_t r = 0; r < members_.size(); ++r) {
    if (members_[r].session_key == session) return static_cast<int>(r);
  }
  return -1;
}

void GroupState::PeerLinkDenialLocked(int rank, const absl::Status& status,
                                      PendingCallbacks* callbacks) const {
  ServerEvent denied;
  denied.kind = EventKind::kAccessDenied;
  denied.action = "peer_link";
  denied.group = name_;
  denied.epoch = epoch_;
  denied.rank = rank;
  denied.identity = members_[rank].identity;
  denied.peer = members_[rank].peer;
  denied.status = status;
  DeferEvent(limits_.events, std::move(denied), callbacks);
}

void GroupState::SettleDataPlaneLocked(const std::string& why_not,
                                       PendingCallbacks* callbacks) {
  links_pending_ = false;
  if (why_not.empty()) {
    data_plane_ = v1::DATA_PLANE_DIRECT;
    data_plane_reason_ = absl::StrCat(
        "every member offered a peer endpoint and made its peer links "
        "(data_plane: ",
        DataPlanePolicyName(config_.data_plane), ")");
  } else {
    data_plane_ = v1::DATA_PLANE_RELAY;
    data_plane_reason_ = why_not;
  }
  v1::DataPlaneChosen chosen;
  chosen.set_data_plane(data_plane_);
  chosen.set_reason(data_plane_reason_);
  for (const Member& member : members_) {
    std::weak_ptr<SessionStream> weak = member.session;
    callbacks->Add([weak, chosen] {
      if (auto session = weak.lock()) session->SendDataPlane(chosen);
    });
  }
  DataPlaneEventLocked(std::nullopt, callbacks);
}

void GroupState::DataPlaneEventLocked(std::optional<uint64_t> seq,
                                      PendingCallbacks* callbacks) const {
  ServerEvent chosen;
  chosen.kind = EventKind::kDataPlaneChosen;
  chosen.group = name_;
  chosen.epoch = epoch_;
  chosen.seq = seq;
  chosen.details.emplace_back("data_plane", DataPlaneName(data_plane_));
  chosen.details.emplace_back("data_plane_reason", data_plane_reason_);
  DeferEvent(limits_.events, std::move(chosen), callbacks);
}

void GroupState::EndEpochLocked(absl::Status status,
                                const SessionStream* except,
                                PendingCallbacks* callbacks) {
  if (!formed_) return;
  formed_ = false;
  links_pending_ = false;
  closing_ = absl::OkStatus();
  ended_status_ = status;
  if (journal_ != nullptr) {
    // Best effort: if it fails, a restart restores the epoch, whose members
    // are gone, and it ends again when their resume grace passes.
    journal_->Ended(epoch_).IgnoreError();
  }
  std::vector<std::string> identities;
  for (const Member& member : members_) identities.push_back(member.identity);
  rounds_.EndEpoch(epoch_, std::move(identities), status, callbacks);
  for (const Member& member : members_) {
    if (member.session_key == except) continue;
    std::weak_ptr<SessionStream> weak = member.session;
    callbacks->Add([weak, status] {
      if (auto session = weak.lock()) session->Close(status);
    });
  }
  members_.clear();
  Emit(EventKind::kGroupDissolved, -1, "", "", status, callbacks);
}

void GroupState::StartResumeGrace(absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (Member& member : members_) {
    member.last_heartbeat = std::max(member.last_heartbeat, now);
    if (member.disconnected) {
      member.disconnected_at = std::max(member.disconnected_at, now);
    }
  }
  rounds_.StartResumeGrace(now);
}

void GroupState::Heartbeat(const SessionStream* session, absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (Member& member : members_) {
    if (member.session_key == session) member.last_heartbeat = now;
  }
}

void GroupState::MemberAlive(uint64_t epoch, int rank, absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (formed_ && epoch == epoch_ && rank >= 0 &&
      rank < static_cast<int>(members_.size())) {
    members_[rank].last_heartbeat = now;
  }
}

void GroupState::AddPeerLinkBytes(uint64_t epoch, int rank, uint64_t sent,
                                  uint64_t received) {
  // A report above this (1 TiB) is counted as this: the sums then cannot
  // overflow before 2^23 rounds.
  constexpr uint64_t kMaxReportedLinkBytes = uint64_t{1} << 40;
  auto add = [&](int64_t* total, uint64_t bytes) {
    const int64_t step =
        static_cast<int64_t>(std::min(bytes, kMaxReportedLinkBytes));
    *total = *total > INT64_MAX - step ? INT64_MAX : *total + step;
  };
  absl::MutexLock lock(&mu_);
  if (formed_ && epoch == epoch_ && rank >= 0 &&
      rank < static_cast<int>(members_.size())) {
    add(&members_[rank].peer_link_bytes_sent, sent);
    add(&members_[rank].peer_link_bytes_received, received);
  }
}

void GroupState::SessionLost(const SessionStream* session,
                             absl::string_view why, absl::Time now,
                             PendingCallbacks* callbacks, bool left) {
  absl::MutexLock lock(&mu_);
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if (it->session_key != session) continue;
    Emit(EventKind::kMemberLeft, -1, it->identity, it->peer,
         absl::CancelledError(
             absl::StrCat("left group '", name_, "' before it formed: ", why)),
         callbacks);
    waiting_.erase(it);
    return;
  }
  for (size_t r = 0; r < members_.size(); ++r) {
    if (members_[r].session_key != session) continue;
    if (limits_.resume_grace > absl::ZeroDuration() && !left) {
      Member& member = members_[r];
      member.disconnected = true;
      member.disconnected_at = now;
      member.lost_why = std::string(why);
      member.session.reset();
      member.session_key = nullptr;
      Emit(EventKind::kMemberLeft, static_cast<int>(r), member.identity,
           member.peer,
           absl::UnavailableError(
               absl::StrCat(Describe(), ": rank ", r, " (", member.identity,
                            ") disconnected: ", why, "; it may resume within ",
                            absl::FormatDuration(limits_.resume_grace))),
           callbacks);
      return;
    }
    const absl::Status left = absl::UnavailableError(
        absl::StrCat(Describe(), ": rank ", r, " (", members_[r].identity,
                     ") disconnected: ", why));
    Emit(EventKind::kMemberLeft, static_cast<int>(r), members_[r].identity,
         members_[r].peer, left, callbacks);
    EndEpochLocked(left, session, callbacks);
    return;
  }
}

absl::StatusOr<std::shared_ptr<Round>> GroupState::FindRound(
    const std::string& identity, const v1::CollectiveHeader& header,
    absl::Time now, PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  if (!formed_ || header.epoch() != epoch_) {
    absl::StatusOr<std::shared_ptr<Round>> ended =
        rounds_.FindEnded(name_, identity, header);
    if (!ended.ok() || *ended != nullptr) return ended;
    if (!formed_ && header.epoch() == epoch_ && !ended_status_.ok()) {
      return ended_status_;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "group '", name_, "' is ",
        formed_ ? absl::StrCat("at epoch ", epoch_) : "not formed",
        "; the collective of rank ", header.rank(), " (", identity, ") seq ",
        header.seq(), " named epoch ", header.epoch(), "; join again"));
  }
  const int world = static_cast<int>(members_.size());
  if (header.rank() >= static_cast<uint32_t>(world)) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(), ": rank ", header.rank(),
                     " is out of range for world size ", world));
  }
  if (links_pending_) {
    return absl::FailedPreconditionError(absl::StrCat(
        Describe(), ": rank ", header.rank(), " (", identity,
        ") started a collective before the server chose the epoch's data "
        "plane (DataPlaneChosen)"));
  }
  Member& member = members_[header.rank()];
  if (member.identity != identity) {
    return absl::PermissionDeniedError(absl::StrCat(
        Describe(), ": identity '", identity, "' may not act as rank ",
        header.rank(), ", which is bound to another identity"));
  }
  if (header.resume() && header.seq() < member.next_seq) {
    const uint64_t seq = header.seq();
    if (std::shared_ptr<Round> round = rounds_.Resumable(seq)) return round;
    if (const absl::Status* outcome = rounds_.Outcome(seq);
        outcome != nullptr && !outcome->ok()) {
      return *outcome;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        Describe(), " seq ", seq, " can no longer be resumed: ",
        limits_.resume_grace > absl::ZeroDuration()
            ? "it ended too long ago"
            : "this server does not resume broken streams (--resume-grace "
              "0)"));
  }
  if (header.seq() != member.next_seq) {
    const absl::Status out_of_order =
        absl::FailedPreconditionError(absl::StrCat(
            Describe(), ": rank ", header.rank(), " (", identity, ") sent seq ",
            header.seq(), " but its next collective is seq ", member.next_seq,
            "; the ranks are calling collectives in a different "
            "order, so the epoch ended; join again"));
    EndEpochLocked(out_of_order, nullptr, callbacks);
    return out_of_order;
  }
  ++member.next_seq;
  const uint64_t seq = header.seq();
  if (journal_ != nullptr) {
    if (absl::Status written = journal_->Started(header.rank(), seq);
        !written.ok()) {
      const absl::Status failed = StateErrorLocked(written);
      EndEpochLocked(failed, nullptr, callbacks);
      return failed;
    }
  }
  if (std::shared_ptr<Round> round = rounds_.InFlight(seq)) return round;
  if (const absl::Status* outcome = rounds_.Outcome(seq); outcome != nullptr) {
    if (!outcome->ok()) return *outcome;
    // Only a rank a quorum round closed without can name a completed seq:
    // every contributor has moved past it.
    return absl::FailedPreconditionError(absl::StrCat(
        Describe(), " seq ", seq, " has already completed without rank ",
        header.rank(), " (", identity,
        "), which came after its quorum deadline; its next collective is seq ",
        seq + 1));
  }
  if (!closing_.ok()) return closing_;
  if (absl::Status admitted = AdmissionLocked(); !admitted.ok()) {
    // Every rank of this seq gets the same refusal; the epoch stays in step.
    KeepOutcomeLocked(seq, admitted);
    return admitted;
  }
  if (rounds_.InFlightCount() >= config_.max_rounds_in_flight) {
    const absl::Status too_many = absl::ResourceExhaustedError(absl::StrCat(
        Describe(), ": rank ", header.rank(), " (", identity, ") started seq ",
        seq, " while ", rounds_.InFlightCount(),
        " rounds are in flight, the group's max_rounds_in_flight; the epoch "
        "ended; join again"));
    EndEpochLocked(too_many, nullptr, callbacks);
    return too_many;
  }
  absl::StatusOr<std::shared_ptr<Round>> round = NewRoundLocked(seq, now);
  if (!round.ok()) {
    const absl::Status failed = StateErrorLocked(round.status());
    EndEpochLocked(failed, nullptr, callbacks);
    return failed;
  }
  rounds_.AddInFlight(seq, *round);
  return *round;
}

absl::Status GroupState::StateErrorLocked(const absl::Status& error) const {
  return absl::UnavailableError(absl::StrCat(
      Describe(),
      " ended: the server could not write its state: ", error.message()));
}

absl::StatusOr<std::shared_ptr<Round>> GroupState::NewRoundLocked(
    uint64_t seq, absl::Time now) {
  std::unique_ptr<RoundRecorder> recorder;
  if (journal_ != nullptr) {
    absl::StatusOr<std::unique_ptr<JournalFile>> created =
        journal_->CreateRoundJournal(seq);
    if (!created.ok()) return created.status();
    recorder = std::make_unique<JournalRecorder>(*std::move(created));
  }
  return std::make_shared<Round>(RoundOptionsLocked(seq, now),
                                 std::move(recorder));
}

RoundOptions GroupState::RoundOptionsLocked(uint64_t seq, absl::Time now) {
  const int world = static_cast<int>(members_.size());
  RoundOptions options;
  options.group = name_;
  options.epoch = epoch_;
  options.seq = seq;
  for (const Member& m : members_) options.identities.push_back(m.identity);
  options.max_buffered_bytes = limits_.max_buffered_bytes_per_round;
  options.max_chunk_bytes = limits_.max_chunk_bytes;
  options.digest = digest_;
  options.direct = data_plane_ == v1::DATA_PLANE_DIRECT;
  const absl::Duration wait = config_.round_deadline > absl::ZeroDuration()
                                  ? config_.round_deadline
                                  : limits_.round_timeout;
  if (config_.min_quorum > 0 && config_.min_quorum < world) {
    options.min_quorum = config_.min_quorum;
    options.quorum_deadline = now + wait;
    options.quorum_wait = wait;
    options.deadline = options.quorum_deadline + limits_.round_timeout;
    options.timeout = wait + limits_.round_timeout;
  } else {
    options.deadline = now + wait;
    options.timeout = wait;
  }
  options.resume_grace = limits_.resume_grace;
  options.resume_window_bytes = limits_.resume_window_bytes;
  options.events = limits_.events;
  options.metrics = limits_.metrics;
  options.started = now;
  options.clock = limits_.clock;
  const uint64_t epoch = epoch_;
  options.on_finished = [this, epoch](uint64_t seq,
                                      const absl::Status& outcome) {
    RoundFinished(epoch, seq, outcome);
  };
  return options;
}

void GroupState::RoundFinished(uint64_t epoch, uint64_t seq,
                               const absl::Status& outcome) {
  PendingCallbacks callbacks;  // runs after the lock is released
  absl::MutexLock lock(&mu_);
  if (!formed_ || epoch != epoch_) return;
  for (uint64_t released : rounds_.Finished(
           seq, outcome.ok(), limits_.resume_grace > absl::ZeroDuration())) {
    if (journal_ != nullptr) journal_->DiscardRound(released);
  }
  KeepOutcomeLocked(seq, outcome);
  if (!outcome.ok() && data_plane_ == v1::DATA_PLANE_DIRECT) {
    // Every rank saw this round fail and falls back with the server
    // (docs/protocol.md, "Data planes"): a peer link may be broken.
    data_plane_ = v1::DATA_PLANE_RELAY;
    data_plane_reason_ = absl::StrCat("fell back to the relay after seq ", seq,
                                      " failed: ", outcome.message());
    DataPlaneEventLocked(seq, &callbacks);
  }
  if (!closing_.ok() && rounds_.InFlightCount() == 0) {
    EndEpochLocked(closing_, nullptr, &callbacks);
  }
}

absl::Status GroupState::AdmissionLocked() const {
  return limits_.admission ? limits_.admission() : absl::OkStatus();
}

void GroupState::KeepOutcomeLocked(uint64_t seq, const absl::Status& outcome) {
  const absl::Status kept = BoundStatus(outcome);
  rounds_.KeepOutcome(seq, kept);
  if (journal_ != nullptr) {
    // Best effort: a restart without it only answers a late rank less well.
    journal_->Finished(seq, kept).IgnoreError();
  }
}

absl::Status GroupState::JoinTimeoutLocked() const {
  std::set<std::string> joined;
  for (const Waiting& w : waiting_) joined.insert(w.identity);
  std::vector<std::string> missing;
  for (const std::string& id : config_.members) {
    if (joined.count(id) == 0) missing.push_back(id);
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "group '", name_, "' did not form within ",
      absl::FormatDuration(limits_.join_timeout), ": ", joined.size(), " of ",
      config_.world_size, " members joined (", absl::StrJoin(joined, ", "),
      "); not joined: ", absl::StrJoin(missing, ", ")));
}

void GroupState::CheckTimers(absl::Time now, PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  // Every waiting member that times out in this check gets one message,
  // built only when someone does.
  absl::Status timeout;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (now - it->since < limits_.join_timeout) {
      ++it;
      continue;
    }
    if (timeout.ok()) timeout = JoinTimeoutLocked();
    Emit(EventKind::kMemberLeft, -1, it->identity, it->peer, timeout,
         callbacks);
    std::weak_ptr<SessionStream> weak = it->session;
    callbacks->Add([weak, timeout] {
      if (auto session = weak.lock()) session->Close(timeout);
    });
    it = waiting_.erase(it);
  }
  rounds_.CheckEnded(now, callbacks);
  if (!formed_) return;
  if (links_pending_ && now >= links_deadline_) {
    for (size_t r = 0; r < link_reports_.size(); ++r) {
      if (link_reports_[r].has_value()) continue;
      SettleDataPlaneLocked(
          absl::StrCat("rank ", r, " (", members_[r].identity,
                       ") did not report its peer links within ",
                       absl::FormatDuration(kLinkReportTimeout)),
          callbacks);
      break;
    }
  }
  for (size_t r = 0; r < members_.size(); ++r) {
    const Member& member = members_[r];
    if (member.disconnected) {
      if (now - member.disconnected_at < limits_.resume_grace) continue;
      EndEpochLocked(absl::UnavailableError(absl::StrCat(
                         Describe(), ": rank ", r, " (", member.identity,
                         ") disconnected: ", member.lost_why,
                         ", and did not resume within ",
                         absl::FormatDuration(limits_.resume_grace))),
                     nullptr, callbacks);
      return;
    }
    const absl::Duration silent = now - members_[r].last_heartbeat;
    if (silent <= limits_.heartbeat_timeout) continue;
    EndEpochLocked(absl::UnavailableError(absl::StrCat(
                       Describe(), ": rank ", r, " (", members_[r].identity,
                       ") sent no heartbeat for ", absl::FormatDuration(silent),
                       " (timeout ",
                       absl::FormatDuration(limits_.heartbeat_timeout), ")")),
                   nullptr, callbacks);
    return;
  }
  rounds_.CheckDeadlines(now, callbacks);
}

void GroupState::RefuseWaitingLocked(
    const std::function<absl::Status(const Waiting&)>& refuse,
    PendingCallbacks* callbacks) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    const absl::Status refused = refuse(*it);
    if (refused.ok()) {
      ++it;
      continue;
    }
    Emit(EventKind::kJoinRefused, it->requested_rank, it->identity, it->peer,
         refused, callbacks);
    std::weak_ptr<SessionStream> weak = it->session;
    callbacks->Add([weak, refused] {
      if (auto session = weak.lock()) session->Close(refused);
    });
    it = waiting_.erase(it);
  }
}

void GroupState::Reconfigure(GroupConfig config, PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  const int old_world = config_.world_size;
  config_ = std::move(config);
  if (formed_ && closing_.ok()) {
    std::vector<std::string> removed;
    std::vector<int> removed_ranks;
    for (size_t r = 0; r < members_.size(); ++r) {
      if (std::find(config_.members.begin(), config_.members.end(),
                    members_[r].identity) == config_.members.end()) {
        removed.push_back(members_[r].identity);
        removed_ranks.push_back(static_cast<int>(r));
      }
    }
    if (!removed.empty()) {
      closing_ = absl::AbortedError(absl::StrCat(
          Describe(), " was closed by a policy reload that removed ",
          absl::StrJoin(removed, ", "), "; join again"));
    } else if (config_.world_size != old_world) {
      closing_ = absl::AbortedError(
          absl::StrCat(Describe(),
                       " was closed by a policy reload that changed the world "
                       "size from ",
                       old_world, " to ", config_.world_size, "; join again"));
    }
    // A round in flight still waiting for a removed member's header can
    // never complete (the member is refused now): fail it at once.
    for (const auto& [seq, round] : rounds_.in_flight()) {
      const std::vector<int> started = round->GetProgress().started;
      for (int r : removed_ranks) {
        if (std::find(started.begin(), started.end(), r) == started.end()) {
          round->Fail(closing_, callbacks);
          break;
        }
      }
    }
    if (!closing_.ok() && rounds_.InFlightCount() == 0) {
      EndEpochLocked(closing_, nullptr, callbacks);
    }
  }
  RefuseWaitingLocked(
      // Called by RefuseWaitingLocked, under mu_.
      [&](const Waiting& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (std::find(config_.members.begin(), config_.members.end(),
                      w.identity) == config_.members.end()) {
          return NotAMemberError(w.identity, name_);
        }
        if (config_.world_size != old_world) {
          return absl::AbortedError(absl::StrCat(
              "a policy reload changed the world size of group '", name_,
              "' from ", old_world, " to ", config_.world_size,
              "; join again with the new size"));
        }
        return absl::OkStatus();
      },
      callbacks);
}

std::vector<uint64_t> GroupState::AbortRounds(const std::string& admin,
                                              absl::string_view reason,
                                              PendingCallbacks* callbacks) {
  return FailRounds(
      absl::StatusCode::kAborted,
      absl::StrCat("was aborted by admin '", admin, "': ", reason), callbacks);
}

std::vector<uint64_t> GroupState::FailRounds(absl::StatusCode code,
                                             absl::string_view why,
                                             PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  return rounds_.FailInFlight(code, why, callbacks);
}

void GroupState::Drain(const absl::Status& why, PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  RefuseWaitingLocked([&](const Waiting&) { return why; }, callbacks);
  if (journal_ != nullptr) return;  // the epoch outlives this process
  if (formed_ && closing_.ok()) {
    closing_ = why;
    if (rounds_.InFlightCount() == 0) {
      EndEpochLocked(closing_, nullptr, callbacks);
    }
  }
}

int GroupState::RoundsInFlight() const {
  absl::MutexLock lock(&mu_);
  return rounds_.InFlightCount();
}

GroupState::Snapshot GroupState::GetSnapshot() const {
  absl::MutexLock lock(&mu_);
  Snapshot snapshot;
  snapshot.config = config_;
  snapshot.formed = formed_;
  snapshot.epoch = epoch_;
  snapshot.digest = formed_ ? digest_ : config_.digest;
  if (formed_) {
    snapshot.data_plane = data_plane_;
    snapshot.data_plane_reason = data_plane_reason_;
  }
  for (const Member& m : members_) {
    snapshot.members.push_back({m.identity, !m.disconnected, m.peer_endpoint,
                                m.peer_link_bytes_sent,
                                m.peer_link_bytes_received});
  }
  for (const Waiting& w : waiting_) snapshot.waiting.push_back(w.identity);
  snapshot.rounds = rounds_.InFlightProgress();
  return snapshot;
}

}  // namespace fedgather::server
