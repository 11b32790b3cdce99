// GroupState: one group's membership, and its rounds through a RoundTable
// (round_table.h: which rounds are in flight, how finished ones ended, and
// which completed ones stay resumable). Members join through their session
// streams; when world_size of them have joined the group forms a new membership
// epoch with ranks assigned (requested ranks first, the rest by sorted
// identity). A member whose session closes or misses heartbeats is detached for
// the resume grace, if the group has one (a member that leaves is not), and may
// resume its session within it; a member lost for good (no grace, or the grace
// passed) ends the epoch: every round in flight fails with UNAVAILABLE naming
// it, the other sessions are closed with the same status, and members join
// again.
//
// The policy can change the group's configuration while it runs
// (Reconfigure): a formed epoch keeps its members and rounds, and the new
// configuration applies to the next joins.
//
// Thread safety: thread-safe. Each method takes the group mutex briefly and
// may call into the group's rounds (lock order: group, then round). Stream
// callbacks go through PendingCallbacks and run after the locks are released.
#ifndef FEDGATHER_SERVER_MEMBERSHIP_GROUP_STATE_H_
#define FEDGATHER_SERVER_MEMBERSHIP_GROUP_STATE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "fedgather/v1/fedgather.pb.h"
#include "server/events/event_sink.h"
#include "server/events/pending_callbacks.h"
#include "server/events/server_counters.h"
#include "server/journal/group_journal.h"
#include "server/membership/group_config.h"
#include "server/membership/round_table.h"
#include "server/relay/round.h"

namespace fedgather::server {

// The server end of one member's session stream, as its group sees it.
class SessionStream {
 public:
  virtual ~SessionStream() = default;
  // SendJoined delivers the formed group's view to this member.
  virtual void SendJoined(const v1::Joined& joined) = 0;
  // SendDataPlane tells this member which plane its epoch runs on, once
  // every member reported its peer links (GroupState::ReportPeerLinks).
  virtual void SendDataPlane(const v1::DataPlaneChosen& chosen) = 0;
  // Close finishes the session with `status`.
  virtual void Close(const absl::Status& status) = 0;
};

// Timeouts and limits that apply to every group of a server.
struct GroupLimits {
  absl::Duration join_timeout = absl::Minutes(5);
  absl::Duration round_timeout = absl::Minutes(5);
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration heartbeat_timeout = absl::Seconds(5);
  int64_t max_buffered_bytes_per_round = int64_t{256} << 20;
  int64_t max_chunk_bytes = int64_t{1} << 20;
  // Resumable collective streams (RoundOptions::resume_grace and
  // resume_window_bytes); zero grace: a broken stream fails its round.
  absl::Duration resume_grace = absl::ZeroDuration();
  int64_t resume_window_bytes = int64_t{32} << 20;
  // Durable rounds: where groups keep their epoch and round journals
  // (GroupJournal); empty keeps nothing, so a restart forgets every epoch.
  // Needs a positive resume_grace: members resume after a restart.
  std::string state_dir;
  // Whether new work may start: while it returns an error, new joins and
  // new rounds are refused with it (the server closes this gate while its
  // audit log cannot be written). Null admits everything. Called under the
  // group's lock: it must not block or take a server lock.
  std::function<absl::Status()> admission;
  EventSink* events = nullptr;        // may be null; must outlive the group
  ServerCounters* metrics = nullptr;  // may be null; must outlive the group
  // Reads the time where no caller passes it in; must outlive the group.
  Clock* clock = SystemClock();
};

class GroupState {
 public:
  GroupState(GroupConfig config, const GroupLimits& limits);
  GroupState(const GroupState&) = delete;
  GroupState& operator=(const GroupState&) = delete;

  // Restore opens the group's journal under limits.state_dir (nothing to do
  // without one) and brings back the epoch the last run left, if it had
  // not ended and its members still match the configuration: its members
  // as disconnected at `now` (each may resume within the resume grace), the
  // seqs they had started, the outcomes of finished rounds, and every round
  // journaled in flight or kept, rebuilt by RestoreRound. An epoch that no
  // longer matches is ended (a kGroupDissolved event says why). Emits
  // kGroupRestored. Errors (the server should not start): the journal
  // cannot be read, or a round journal is damaged (DATA_LOSS naming it).
  absl::Status Restore(absl::Time now, PendingCallbacks* callbacks);
  // StartResumeGrace counts the resume grace and heartbeat timeout of every
  // disconnected member, and the resume grace of every detached rank of its
  // rounds, from `now` at the earliest: the server calls it once it listens,
  // after a restore that may have taken a good part of the grace.
  void StartResumeGrace(absl::Time now);

  // Join adds `identity`'s session to the members waiting for the group to
  // form; when it is the last one, every waiting session gets SendJoined.
  // Errors (the session should be finished with them):
  //   PERMISSION_DENIED   the identity is not a member of the group
  //   INVALID_ARGUMENT    world size differs from the group's, or the rank
  //                       is out of range
  //   ALREADY_EXISTS      the identity is already waiting, or the rank is
  //                       taken
  //   FAILED_PRECONDITION the group is formed and full
  // A current member that joins again ends the epoch first (it restarted),
  // unless it names the current epoch in resume_epoch (and its rank): then
  // its new session takes the old one's place and gets Joined again. A
  // resume_epoch that is not current is FAILED_PRECONDITION. While
  // limits.admission refuses, a join that is not a resume gets its status.
  // `peer` is the session's address, for events.
  absl::Status Join(const std::string& identity, const std::string& peer,
                    const v1::JoinRequest& request,
                    std::shared_ptr<SessionStream> session, absl::Time now,
                    PendingCallbacks* callbacks);

  // MemberAlive records that rank `rank` of `epoch` sent data, which counts
  // as a heartbeat: a member busy uploading is alive.
  void MemberAlive(uint64_t epoch, int rank, absl::Time now);

  // AddPeerLinkBytes adds what rank `rank` of `epoch` reported its ring
  // moved in a direct round (Delivery.link_bytes_*): `sent` on its link to
  // rank+1, `received` on its link from rank-1. Each report counts at most
  // kMaxReportedLinkBytes and the sums saturate (a member's word only;
  // nothing rests on it but status and metrics). Ignored for another epoch.
  void AddPeerLinkBytes(uint64_t epoch, int rank, uint64_t sent,
                        uint64_t received);

  // Heartbeat records that `session` is alive.
  void Heartbeat(const SessionStream* session, absl::Time now);

  // SessionLost reports that `session` ended at `now`; for a member of the
  // current epoch that ends the epoch, unless sessions are resumable
  // (GroupLimits::resume_grace): then the member may join again with
  // resume_epoch within the grace (CheckTimers ends the epoch after it). No
  // effect for an unknown session. `left`: the member will not resume (it
  // left on purpose, or its certificate was revoked), so the epoch ends at
  // once and its rounds in flight fail.
  void SessionLost(const SessionStream* session, absl::string_view why,
                   absl::Time now, PendingCallbacks* callbacks,
                   bool left = false);

  // FindRound returns the round `header` names, creating it for a new seq,
  // and the caller's rank. Checks that the epoch is current, that `identity`
  // holds header.rank, and that the rank sends its seqs in order; a rank out
  // of order ends the epoch with FAILED_PRECONDITION. A header for a round
  // that already failed gets that round's status. A resuming header
  // (header.resume) may name a seq the rank already sent: its round, in
  // flight or recently completed, is returned. That holds for the epoch
  // that ended last too: its completed rounds stay resumable by their ranks
  // until each is settled (Round::Settled; CheckTimers drops it), so a
  // member that leaves after a commit takes the result from nobody whose
  // download broke. While limits.admission refuses, a header that would
  // open a new round gets its status, and so does every rank of that seq
  // (rounds in flight carry on).
  absl::StatusOr<std::shared_ptr<Round>> FindRound(
      const std::string& identity, const v1::CollectiveHeader& header,
      absl::Time now, PendingCallbacks* callbacks);

  // ReportPeerLinks takes a member's report of its peer links (PeerLinks)
  // in an epoch that formed as a direct candidate. Once every member has
  // reported, the epoch runs direct if every report is OK, else on the
  // relay; every member is told (SessionStream::SendDataPlane) and the
  // choice is an event (kDataPlaneChosen). A report that names an
  // authentication failure is also an kAccessDenied event (action
  // "peer_link"). A report that comes late (the plane was settled at the
  // deadline) or twice changes nothing. FAILED_PRECONDITION for a session
  // that is not a member of the formed epoch.
  absl::Status ReportPeerLinks(const SessionStream* session,
                               const v1::PeerLinks& report,
                               PendingCallbacks* callbacks);

  // ReportPeerRefusal audits a connection a member's peer listener refused
  // (PeerRefusal) as a denial: an kAccessDenied event, action "peer_link",
  // naming the reporting member. At most kMaxPeerRefusalReports per member
  // and epoch are kept; later ones are dropped. FAILED_PRECONDITION for a
  // session that is not a member of the formed epoch.
  absl::Status ReportPeerRefusal(const SessionStream* session,
                                 const v1::PeerRefusal& refusal,
                                 PendingCallbacks* callbacks);
  static constexpr int kMaxPeerRefusalReports = 32;

  // CheckTimers enforces join timeouts, heartbeat timeouts and round
  // deadlines as of `now`.
  void CheckTimers(absl::Time now, PendingCallbacks* callbacks);

  // Reconfigure applies a new configuration of the same group from a policy
  // reload. Waiting members the new configuration no longer lists are
  // refused with PERMISSION_DENIED; when the world size changed, every
  // waiting member is refused with ABORTED (join again with the new size).
  // A formed epoch whose members all stay, at the same world size, carries
  // on. Otherwise the epoch closes: its rounds in flight complete (except
  // those still waiting for a removed member, which fail at once), a new
  // round is refused with ABORTED naming why, and once no round is in flight
  // the epoch ends with that status, so the members join again under the
  // new policy.
  void Reconfigure(GroupConfig config, PendingCallbacks* callbacks);

  // AbortRounds fails every round in flight of the current epoch with
  // ABORTED naming `admin` and `reason`, and returns their seqs. The epoch
  // carries on: the next round works.
  std::vector<uint64_t> AbortRounds(const std::string& admin,
                                    absl::string_view reason,
                                    PendingCallbacks* callbacks);
  // FailRounds fails every round in flight with `code` and "<round> <why>",
  // and returns their seqs.
  std::vector<uint64_t> FailRounds(absl::StatusCode code, absl::string_view why,
                                   PendingCallbacks* callbacks);

  // Drain prepares the group for a shutdown: identities waiting for it to
  // form are refused with `why`. Without a journal (no limits.state_dir) a
  // formed epoch starts no new round (a new seq gets `why`), and once its
  // rounds in flight are over the epoch ends with `why`. With one the epoch
  // goes on: it and its rounds are journaled, so its members resume them
  // against the restarted server within the resume grace.
  void Drain(const absl::Status& why, PendingCallbacks* callbacks);

  // Snapshot is the group's state for a status report.
  struct MemberSnapshot {
    std::string identity;
    bool connected = false;     // false while its broken session may resume
    std::string peer_endpoint;  // what it offered when the epoch formed
    // What it reported its peer links moved this epoch (AddPeerLinkBytes).
    int64_t peer_link_bytes_sent = 0;
    int64_t peer_link_bytes_received = 0;
  };
  struct Snapshot {
    GroupConfig config;
    bool formed = false;
    uint64_t epoch = 0;
    // The formed epoch's digest algorithm, else the next epoch's.
    DigestAlgorithm digest = DigestAlgorithm::kBlake3;
    // The formed epoch's data plane and why (RELAY and empty when not
    // formed).
    v1::DataPlane data_plane = v1::DATA_PLANE_RELAY;
    std::string data_plane_reason;
    std::vector<MemberSnapshot> members;  // by rank, when formed
    std::vector<std::string> waiting;     // identities waiting to form
    std::vector<Round::Progress> rounds;
  };
  Snapshot GetSnapshot() const;
  // RoundsInFlight counts the current epoch's rounds that have not finished.
  int RoundsInFlight() const;

 private:
  struct Waiting {
    std::string identity;
    std::string peer;
    int requested_rank = -1;
    std::string peer_endpoint;  // offered in the join; may be empty
    std::weak_ptr<SessionStream> session;
    const SessionStream* session_key = nullptr;
    absl::Time since;
  };
  struct Member {
    std::string identity;
    std::string peer;
    std::string peer_endpoint;  // offered when the epoch formed
    std::weak_ptr<SessionStream> session;
    const SessionStream* session_key = nullptr;
    absl::Time last_heartbeat;
    uint64_t next_seq = 0;
    // Its session broke at disconnected_at (why); it may resume.
    bool disconnected = false;
    absl::Time disconnected_at;
    std::string lost_why;
    int refusals_reported = 0;         // PeerRefusal reports audited this epoch
    int64_t peer_link_bytes_sent = 0;  // AddPeerLinkBytes
    int64_t peer_link_bytes_received = 0;
  };

  std::string Describe() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FormLocked(absl::Time now, PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ChooseDataPlaneLocked sets the new epoch's data plane from the policy
  // and the members' offers: direct when the policy allows it, the group
  // is not a quorum group and every member offered a peer endpoint.
  void ChooseDataPlaneLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SettleDataPlaneLocked ends a candidate's wait for peer links: direct
  // when `why_not` is empty, else the relay for that reason; every member
  // is told.
  void SettleDataPlaneLocked(const std::string& why_not,
                             PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FormedRankLocked is the rank of `session`'s member in the formed
  // epoch, or -1.
  int FormedRankLocked(const SessionStream* session) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PeerLinkDenialLocked audits what rank `rank` reported of a peer link
  // as a denial (kAccessDenied, action "peer_link").
  void PeerLinkDenialLocked(int rank, const absl::Status& status,
                            PendingCallbacks* callbacks) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // DataPlaneEventLocked reports the epoch's plane and why (kDataPlaneChosen;
  // `seq`: the round whose failure made it fall back).
  void DataPlaneEventLocked(std::optional<uint64_t> seq,
                            PendingCallbacks* callbacks) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // AdmissionLocked is limits_.admission's answer (OK without one).
  absl::Status AdmissionLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // KeepOutcomeLocked keeps how round `seq` ended, for ranks that come late
  // (and in the journal, for after a restart).
  void KeepOutcomeLocked(uint64_t seq, const absl::Status& outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // JoinedLocked is the formed epoch's view for `rank`.
  v1::Joined JoinedLocked(int rank) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ResumeLocked gives a member's rank back to its new session.
  absl::Status ResumeLocked(const std::string& identity,
                            const std::string& peer,
                            const v1::JoinRequest& request,
                            std::shared_ptr<SessionStream> session,
                            absl::Time now, PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // EndEpochLocked fails every round and closes every session but `except`.
  // `status` is taken by value: callers may pass closing_, which it resets.
  void EndEpochLocked(absl::Status status, const SessionStream* except,
                      PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // JoinTimeoutLocked says who has joined and who has not.
  absl::Status JoinTimeoutLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RoundFinished(uint64_t epoch, uint64_t seq, const absl::Status& outcome);
  // NewRoundLocked creates round `seq` of the current epoch, with its
  // journal under the state directory, if any.
  absl::StatusOr<std::shared_ptr<Round>> NewRoundLocked(uint64_t seq,
                                                        absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  RoundOptions RoundOptionsLocked(uint64_t seq, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // StateErrorLocked is the status an epoch ends with when the group's
  // state cannot be written.
  absl::Status StateErrorLocked(const absl::Status& error) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Emit(EventKind kind, int rank, const std::string& identity,
            const std::string& peer, const absl::Status& status,
            PendingCallbacks* callbacks) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RefuseWaitingLocked closes the waiting sessions `refuse` picks with the
  // status it returns (OK: keep waiting).
  void RefuseWaitingLocked(
      const std::function<absl::Status(const Waiting&)>& refuse,
      PendingCallbacks* callbacks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  const GroupLimits limits_;

  mutable absl::Mutex mu_;
  std::unique_ptr<GroupJournal> journal_ ABSL_GUARDED_BY(mu_);  // may be null
  GroupConfig config_ ABSL_GUARDED_BY(mu_);
  std::vector<Waiting> waiting_ ABSL_GUARDED_BY(mu_);
  bool formed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // The hash the epoch names contributions by: the config's when it
  // formed, the journal's when restored.
  DigestAlgorithm digest_ ABSL_GUARDED_BY(mu_) = DigestAlgorithm::kBlake3;
  // The formed epoch's data plane and why (ChooseDataPlaneLocked); it
  // falls back to the relay for good when a round of the epoch fails.
  v1::DataPlane data_plane_ ABSL_GUARDED_BY(mu_) = v1::DATA_PLANE_RELAY;
  std::string data_plane_reason_ ABSL_GUARDED_BY(mu_);
  // A direct candidate waits for every member's peer links (by rank: its
  // report, once in) until links_deadline_; no round starts meanwhile.
  bool links_pending_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::optional<absl::Status>> link_reports_ ABSL_GUARDED_BY(mu_);
  absl::Time links_deadline_ ABSL_GUARDED_BY(mu_);
  std::vector<Member> members_ ABSL_GUARDED_BY(mu_);  // by rank
  // The rounds in flight, their outcomes, and the completed rounds kept
  // for resumes, of this epoch and of the one that ended last.
  RoundTable rounds_ ABSL_GUARDED_BY(mu_);
  // Set when a policy reload closed the formed epoch: why.
  absl::Status closing_ ABSL_GUARDED_BY(mu_);
  // Why the last epoch ended, for streams that still name it.
  absl::Status ended_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_MEMBERSHIP_GROUP_STATE_H_
