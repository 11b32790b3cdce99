// Round: the state machine of one collective (group, epoch, seq) on the
// server, and the star relay's RoundDataPlane (server/control/
// round_data_plane.h): every chunk goes through it. It owns the round's chunk
// log (FanOutLog, fan_out_log.h): every frame a rank uploads is kept once,
// reference-counted, and each other rank's stream walks the log with its own
// cursor (cut-through fan-out, no copy per receiver). A frame is released when
// every receiver has written it. The memory the log holds is bounded by
// RoundOptions::max_buffered_bytes: each frame is charged its bytes plus
// kFrameChargeBytes for what holds it, and an uploader that pushes the round
// past the limit is paused until receivers drain (backpressure). The log's
// entries outlive their frames (a resume finds its place by them), so a round
// takes at most max_buffered_bytes / kLogEntryBytes frames and fails with
// RESOURCE_EXHAUSTED past that: tiny chunks cannot make a round hold more than
// about twice the limit, plus the resume window. A round rebuilt from its
// journal after a restart (ReplayChunk) keeps to the same limit: the oldest
// replayed frames leave memory and are read back from the journal, for each
// receiver, when its stream needs them.
//
// Thread safety: all methods are thread-safe and take the round's own mutex
// briefly. Methods that change state add stream wake-ups and events to a
// PendingCallbacks, which the caller runs after the call returns, so no
// callback ever runs under the round's lock. NextOutgoing may be called with
// the calling stream's own lock held; the round never calls into a stream
// while holding its lock.
#ifndef FEDGATHER_SERVER_RELAY_ROUND_H_
#define FEDGATHER_SERVER_RELAY_ROUND_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/content_hasher.h"
#include "common/fingerprint.h"
#include "common/frame_codec.h"
#include "fedgather/v1/fedgather.pb.h"
#include "server/control/contribution_ledger.h"
#include "server/control/round_agreement.h"
#include "server/control/round_data_plane.h"
#include "server/events/event_sink.h"
#include "server/events/pending_callbacks.h"
#include "server/events/server_counters.h"
#include "server/relay/attach_request.h"
#include "server/relay/fan_out_log.h"
#include "server/relay/reducer.h"
#include "server/relay/round_recorder.h"

namespace fedgather::server {

// The payload of a status that asks the client to try again shortly.
inline constexpr char kRetryPayload[] = "fedgather/retry";

struct RoundOptions {
  std::string group;
  uint64_t epoch = 0;
  uint64_t seq = 0;
  std::vector<std::string> identities;  // by rank; size is the world size
  // What the round's frames may hold in memory, charged as the class
  // comment says; and the frames it takes (max_buffered_bytes /
  // kLogEntryBytes).
  int64_t max_buffered_bytes = 256 << 20;
  // The chunk limit: ALL_REDUCE result chunks hold at most this many bytes.
  int64_t max_chunk_bytes = int64_t{1} << 20;
  // The hash of the round's digests: each upload's, checked against its
  // ContributionEnd, and an ALL_REDUCE result's (the epoch's algorithm).
  DigestAlgorithm digest = DigestAlgorithm::kBlake3;
  // The epoch runs the direct data plane (docs/protocol.md, "Data
  // planes"): its rounds then take no chunks, and every rank's header goes
  // to every other rank. Each rank's end carries the digest it claims for
  // its part; once every end is in, every stream is sent the claims (a
  // Commit in the claims slot), and the round commits only when every
  // rank's Delivery says the parts it received over its peer links match
  // them, and for an ALL_REDUCE that every rank holds the same result
  // (ConfirmDelivery).
  bool direct = false;
  // The hard deadline: past it the round fails with DEADLINE_EXCEEDED.
  absl::Time deadline = absl::InfiniteFuture();
  absl::Duration timeout = absl::InfiniteDuration();  // for messages only
  // A quorum round (0 < min_quorum < world size) waits for every rank until
  // quorum_deadline. Then the ranks that have started contributing are the
  // round's contributors, if they are at least min_quorum (and include a
  // BROADCAST's root): the others are shut out and the round commits when
  // the contributors finish. Fewer, and the round fails with
  // DEADLINE_EXCEEDED naming the missing ranks.
  int min_quorum = 0;
  absl::Time quorum_deadline = absl::InfiniteFuture();
  absl::Duration quorum_wait = absl::InfiniteDuration();  // for messages
  // Resumable streams: when positive, a rank whose stream breaks is detached
  // rather than failing the round, and may resume (Resume) within this
  // grace; after it the round fails with UNAVAILABLE (or, once complete,
  // gives up on delivering to it). Zero: a broken stream fails the round.
  absl::Duration resume_grace = absl::ZeroDuration();
  // Frames every receiver has written are kept until this many newer bytes
  // (charged as in the log) have been, so a receiver can resume the frames
  // its broken stream had written but it never got.
  int64_t resume_window_bytes = int64_t{32} << 20;
  EventSink* events = nullptr;  // may be null
  // Counts payload bytes and the time to the first chunk; may be null.
  ServerCounters* metrics = nullptr;
  absl::Time started = absl::InfinitePast();  // when the round was created
  Clock* clock = SystemClock();  // times the first chunk; must outlive it
  // Called once, through PendingCallbacks, when the round has completed (OK)
  // or failed (its status).
  std::function<void(uint64_t seq, const absl::Status& outcome)> on_finished;
};

class Round : public RoundDataPlane {
 public:
  // The log's charges (FanOutLog).
  static constexpr int64_t kFrameChargeBytes = FanOutLog::kFrameChargeBytes;
  static constexpr int64_t kLogEntryBytes = FanOutLog::kLogEntryBytes;

  // With a `recorder` (a JournalRecorder when the server has a state
  // directory), every change to the round's log is recorded
  // (RoundRecorder) before it takes effect, and a contribution's end is
  // durable before it counts, so a committed round's contributions are. A
  // record that fails fails the round with the error.
  explicit Round(RoundOptions options,
                 std::unique_ptr<RoundRecorder> recorder = nullptr);
  Round(const Round&) = delete;
  Round& operator=(const Round&) = delete;

  // Attach registers `request.rank`'s stream with its header. The first header
  // fixes the op and fingerprint; every later one must agree: a different op is
  // FAILED_PRECONDITION, a different fingerprint INVALID_ARGUMENT, and either
  // fails the round on every rank. `header_frame` is forwarded to the other
  // ranks. Returns the round's failure when it has already failed.
  // For BROADCAST every rank must name
  // the same root (INVALID_ARGUMENT otherwise, failing the round); only the
  // root's frames are forwarded, to every other rank, and the other ranks
  // upload no bytes. For ALL_REDUCE every rank must name the same reduction
  // (and a positive weight for WEIGHTED_MEAN); nothing a rank uploads is
  // forwarded: the round reduces it (OfferReduceChunk) and every rank gets
  // the result. A rank shut out of a quorum round gets FAILED_PRECONDITION,
  // and the round carries on.
  absl::Status Attach(AttachRequest request, PendingCallbacks* callbacks);

  // Where a resumed stream goes on.
  struct ResumePoint {
    int64_t upload_bytes = 0;   // of this rank's contribution, already held
    bool upload_ended = false;  // its end was received
    // The hash of those bytes, to continue; none when the rank had not
    // started (the stream then starts its own).
    std::optional<ContentHasher> hasher;
  };
  // Resume hands `request.rank`'s round to a new stream after its old one broke
  // (header.resume set; see StreamLost). The download goes on after the
  // header.frames_received frames the client has. Errors, for this stream
  // only: UNAVAILABLE while the old stream is not yet known to be gone
  // (retry), FAILED_PRECONDITION for a rank a quorum round shut out.
  // Errors that fail the round: INVALID_ARGUMENT for equivocation (a header,
  // fingerprint or contribution SHA-256 other than the rank's first, which
  // is also an kEquivocation event), UNAVAILABLE when frames the client
  // lacks are no longer held. A rank whose header never arrived is attached
  // as by Attach.
  absl::StatusOr<ResumePoint> Resume(AttachRequest request,
                                     PendingCallbacks* callbacks);

  // OfferChunk adds a chunk frame uploaded by `rank` carrying `payload_bytes`
  // bytes to the log. Returns true when the uploader may read its next frame
  // now, false when it must wait for RoundStream::ResumeReading.
  bool OfferChunk(int rank, grpc::ByteBuffer frame, int64_t payload_bytes,
                  PendingCallbacks* callbacks) override;
  // ReplayChunk is OfferChunk for a chunk replayed from the journal, whose
  // frame lies there at `journal_offset` (RestoreRound): while the round
  // holds more than max_buffered_bytes, the oldest replayed frames leave
  // memory, to be read back from the journal Restored hands over.
  void ReplayChunk(int rank, grpc::ByteBuffer frame, int64_t payload_bytes,
                   int64_t journal_offset, PendingCallbacks* callbacks);

  // OfferReduceChunk folds an ALL_REDUCE chunk of `rank` (`meta`, with
  // meta.size bytes at `data`, which need not outlive the call, validated by
  // ChunkSequence) into the reduction, by element range whatever the
  // chunking (Reducer); the elements every contributor has now folded
  // become result frames for every rank. Returns as OfferChunk does, except
  // that a rank that only folds into elements another rank already started
  // never waits: only the ranks ahead are held back, so the slowest always
  // catches up.
  // `frame` is the chunk's frame as it arrived, which the recorder takes as
  // is (it is not forwarded).
  bool OfferReduceChunk(int rank, const grpc::ByteBuffer& frame,
                        const ChunkMeta& meta, const uint8_t* data,
                        PendingCallbacks* callbacks) override;

  // EndContribution records that `rank`'s upload is complete with `digest`.
  // When it is the last contribution the round completes and every stream is
  // woken to send the commit after its remaining chunks; a direct round
  // sends the claims instead and waits for every rank's delivery.
  void EndContribution(int rank, const Digest& digest,
                       PendingCallbacks* callbacks) override;

  // NextOutgoing tells `rank`'s stream what to do next. The stream must not
  // have a write in flight. A frame that left memory is read back from the
  // journal here (under the round's lock); if it cannot be, the round fails
  // with DATA_LOSS naming the journal.
  Outgoing NextOutgoing(int rank, PendingCallbacks* callbacks) override;

  // WriteDone reports that `rank`'s last kFrame write finished; `ok` false
  // means the stream is gone (once the round completed, without resumable
  // streams, its claims on the frames it has not written are dropped).
  void WriteDone(int rank, bool ok, PendingCallbacks* callbacks) override;

  // StreamLost reports that `rank`'s stream closed or was cancelled. Before
  // completion this fails the round with UNAVAILABLE naming the rank, unless
  // streams are resumable: then the rank is detached, keeping `hasher` (the
  // hash of the upload so far) for the stream that resumes it, until
  // resume_grace passes (CheckDeadline). After completion, without
  // resumable streams, the rank's claims on the frames it has not written
  // are dropped at once, so they are released. The stream must not call into
  // the round afterwards.
  void StreamLost(int rank, absl::string_view why, absl::Time now,
                  PendingCallbacks* callbacks,
                  std::optional<ContentHasher> hasher = std::nullopt) override;

  // Whether the epoch runs the direct plane (RoundOptions::direct); every
  // round of it then runs there.
  bool direct_epoch() const { return options_.direct; }
  // ConfirmDelivery records that `rank` received every part over its peer
  // links and found each to hash to the claims; the last one commits the
  // round. FAILED_PRECONDITION, changing nothing, before the claims were
  // sent or for a rank that already confirmed. For an ALL_REDUCE,
  // `result_digest` is the digest of the result the rank holds: it must be
  // a digest (INVALID_ARGUMENT, changing nothing) and every rank's the same
  // (else the round fails with DATA_LOSS naming two ranks); the commit's
  // result_digest is it.
  absl::Status ConfirmDelivery(int rank, absl::string_view result_digest,
                               PendingCallbacks* callbacks);

  // Fail fails the round with `status` on every rank; the first failure
  // sticks and later calls do nothing. No effect once the round completed.
  void Fail(const absl::Status& status, PendingCallbacks* callbacks);
  // Failure is the status the round failed with; OK while it has not.
  absl::Status Failure() const;

  // CheckDeadline fails the round with DEADLINE_EXCEEDED, listing the ranks
  // that had not contributed and their byte progress, once `now` passes the
  // deadline. At the quorum deadline it closes a quorum round to the ranks
  // that have not started (or fails it, below quorum).
  void CheckDeadline(absl::Time now, PendingCallbacks* callbacks);

  // CloseQuorum closes a quorum round now, as its quorum deadline does
  // (RestoreRound replays a journaled kQuorumClosed with it).
  void CloseQuorum(PendingCallbacks* callbacks);

  // Restored ends RestoreRound's replay of a journal into this round (built
  // without a journal): every attached rank is detached as if its stream had
  // broken at `now`, keeping upload_hashers[rank], the hash of its upload so
  // far, and `recorder` takes the round's records from here on. A rank that
  // then resumes with more frames than the replayed log holds for it gets
  // DATA_LOSS, failing the round: the journal lost frames the rank had
  // received (the machine crashed before they reached the disk).
  void Restored(absl::Time now, std::vector<ContentHasher> upload_hashers,
                std::unique_ptr<RoundRecorder> recorder);
  // StartResumeGrace counts the resume grace of every detached rank from
  // `now` at the earliest: a restarted server calls it once it listens, so
  // that the time its restore took is not taken from the ranks' grace.
  void StartResumeGrace(absl::Time now);
  // Finished is true once the round has completed or failed; Complete once
  // it has committed.
  bool Finished() const;
  bool Complete() const;
  // Settled is true once no rank can come back for this completed round:
  // every contributor had its commit handed over, or was given up (shut out
  // by a quorum, or lost after its grace: CheckDeadline), and the resume
  // grace has passed since that was first seen here or by CheckDeadline.
  // False while the round has not completed.
  bool Settled(absl::Time now);

  // Describe names the round: "group 'demo' epoch 1 seq 0".
  std::string Describe() const;
  // The hash of the round's digests (RoundOptions::digest).
  DigestAlgorithm digest_algorithm() const { return options_.digest; }

  // BufferedBytes is the payload held in the log right now for receivers
  // that have not written it (what the limit counts).
  int64_t BufferedBytes() const;
  // TailBytes is the payload every receiver wrote, kept for resumes.
  int64_t TailBytes() const;

  // Progress is which ranks have started and which have completed their
  // contributions, for status reports.
  struct Progress {
    uint64_t seq = 0;
    std::vector<int> started;
    std::vector<int> complete;
    // By rank: payload bytes received from it, frame bytes written to it.
    std::vector<int64_t> bytes_in;
    std::vector<int64_t> bytes_out;
    int64_t buffered_bytes = 0;
    absl::Time deadline = absl::InfiniteFuture();
  };
  Progress GetProgress() const;

 private:
  // RankPhase is where a rank's stream stands in the round (whether the
  // rank started, was shut out by a quorum, or ended its upload is the
  // ledger's: ContributionLedger):
  //   kWaiting    no header yet (also for good, once a quorum shut it out)
  //   kStreaming  attached: its stream sends and receives
  //   kCommitSent its stream was handed the commit
  //   kDetached   its stream broke; it may resume within resume_grace
  //   kLost       gone for good (no resume, or its grace passed)
  // kWaiting -> kStreaming; kStreaming -> kCommitSent | kDetached | kLost;
  // kCommitSent -> kDetached (a resume takes the commit back);
  // kDetached -> kStreaming | kLost.
  enum class RankPhase {
    kWaiting,
    kStreaming,
    kCommitSent,
    kDetached,
    kLost,
  };
  struct RankState {
    RankPhase phase = RankPhase::kWaiting;
    std::string peer;
    std::weak_ptr<RoundStream> stream;
    int64_t expected_bytes = 0;
    int64_t received_bytes = 0;
    int64_t chunks = 0;      // chunk frames received from it
    int64_t sent_bytes = 0;  // frame bytes its stream has written
    // The flow of its stream: a write handed out and not yet done; reading
    // paused until the round has room (ResumeReading).
    bool write_in_flight = false;
    bool read_paused = false;
    // Direct rounds: the claims were handed to its stream (the write is in
    // flight while claims_in_flight), and it confirmed its delivery.
    bool claims_sent = false;
    bool claims_in_flight = false;
    bool delivered = false;
    // kDetached: when its stream broke, and the hash of its upload so far,
    // waiting for the stream that resumes it.
    absl::Time detached_at;
    std::optional<ContentHasher> upload_hasher;
    // After a restore, until the rank resumes: the frames the replayed log
    // holds for it (-1 otherwise).
    int64_t restored_frames = -1;
  };

  bool finished() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return complete_ || !status_.ok();
  }
  // CloseQuorumLocked closes the round to the ranks that have not started,
  // at the quorum deadline.
  void CloseQuorumLocked(PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ClaimLocked sends a direct round's claims once every rank has ended.
  void ClaimLocked(PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ContributionsFrameLocked is a frame listing every contributor's digest:
  // in the commit slot, or, for a direct round's claims, the claims slot.
  grpc::ByteBuffer ContributionsFrameLocked(bool claims) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CompleteLocked commits the round once every contributor has ended.
  void CompleteLocked(PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // AppendResultLocked hashes a finished ALL_REDUCE chunk and appends it
  // for every rank.
  void AppendResultLocked(int tensor, int64_t offset, std::string data,
                          PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // HeldLocked is what counts against max_buffered_bytes: frames in the log
  // and the reduction's accumulators.
  int64_t HeldLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string RankName(int rank) const;
  // Append adds a frame uploaded by `rank` for every other rank, or, with
  // rank kEveryRank, a result frame for every rank.
  // False when the frame has no receiver (it is dropped).
  bool Append(int rank, grpc::ByteBuffer frame, int64_t bytes,
              PendingCallbacks* callbacks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RoomForFrameLocked is true when the log may take one more frame from
  // `rank`; else it fails the round with RESOURCE_EXHAUSTED.
  bool RoomForFrameLocked(int rank, PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // AcceptChunkLocked counts `rank`'s chunk and appends it to the log
  // (false: it has no receiver).
  bool AcceptChunkLocked(int rank, grpc::ByteBuffer frame,
                         int64_t payload_bytes, PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FrameLocked is the bytes of `entry`, read back from the journal when it
  // was spilled.
  absl::StatusOr<grpc::ByteBuffer> FrameLocked(
      const FanOutLog::Entry& entry) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PauseIfFullLocked pauses `rank`'s reading when the round holds too much.
  bool PauseIfFullLocked(int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr int kEveryRank = FanOutLog::kEveryRank;
  // ResumeReadersLocked is called when the log released frames: once the
  // round holds less than max_buffered_bytes, paused uploaders read again.
  void ResumeReadersLocked(PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // TakeBackCommitLocked counts a commit handed to a rank's stream as not
  // sent, when the rank may resume (its stream broke, or it resumes).
  void TakeBackCommitLocked(RankState& state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SettledLocked is Settled for a completed round.
  bool SettledLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ReleaseTailAfterGraceLocked frees the resume tail of a completed round
  // once it is settled.
  void ReleaseTailAfterGraceLocked(absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // DropClaimsLocked gives up `rank`'s claims on the frames it has not
  // written (it will never receive them).
  void DropClaimsLocked(int rank, PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AttachLocked(AttachRequest request, PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The steps of Resume, in order. CheckResumableLocked: the rank is
  // detached and may resume now (a commit that did not arrive counts as a
  // broken stream). CheckSameContributionLocked: the request repeats the
  // rank's first header and its declared SHA-256, which it returns.
  // CheckRestoredFramesLocked: after a restore, the journal held the frames
  // the client has. ReclaimLocked: moves the rank's cursor after the
  // client's last frame (FanOutLog::Reclaim), returning the bytes to send
  // again.
  absl::Status CheckResumableLocked(int rank)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Digest> CheckSameContributionLocked(
      const AttachRequest& request, PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckRestoredFramesLocked(int rank, uint64_t frames,
                                         PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int64_t> ReclaimLocked(int rank, uint64_t frames,
                                        PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ShutOutErrorLocked is what a rank a quorum round closed without gets.
  absl::Status ShutOutErrorLocked(int rank) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // EquivocationLocked reports `rank`'s `equivocation` (RoundAgreement's
  // status) and fails the round with it, which it returns.
  absl::Status EquivocationLocked(int rank, const absl::Status& equivocation,
                                  PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailLocked(const absl::Status& status, PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RecordedLocked is true when `recorded` (what the recorder returned) is
  // OK, else it fails the round with it.
  bool RecordedLocked(const absl::Status& recorded, PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CountReceivedLocked adds a chunk's payload to `rank`'s upload and to
  // the metrics.
  void CountReceivedLocked(int rank, int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WakeAll(PendingCallbacks* callbacks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Wake(int rank, PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ServerEvent MakeEvent(EventKind kind, int rank) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string ProgressLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RoundOptions options_;
  const int world_;

  mutable absl::Mutex mu_;
  std::unique_ptr<RoundRecorder> recorder_ ABSL_GUARDED_BY(mu_);  // or null
  // What the ranks agreed on (op, root, reduction, fingerprint) and the
  // equivocation checks: the control part, which knows no log.
  RoundAgreement agreement_ ABSL_GUARDED_BY(mu_);
  // Who started, who a quorum shut out, and each contributor's digest: the
  // control part too.
  ContributionLedger ledger_ ABSL_GUARDED_BY(mu_);
  bool first_chunk_seen_ ABSL_GUARDED_BY(mu_) = false;
  // ALL_REDUCE: the reducer, each rank's weight, the hash of the result
  // frames in the order they were made.
  std::unique_ptr<Reducer> reducer_ ABSL_GUARDED_BY(mu_);
  std::vector<double> weights_ ABSL_GUARDED_BY(mu_);
  ContentHasher result_hasher_ ABSL_GUARDED_BY(mu_);
  Digest result_digest_ ABSL_GUARDED_BY(mu_){};
  std::vector<RankState> ranks_ ABSL_GUARDED_BY(mu_);
  FanOutLog log_ ABSL_GUARDED_BY(mu_);
  // Handing a commit to a stream is not delivering it: a stream may break
  // with the commit still in its buffers, and the rank then resumes
  // (StreamLost, Resume). So the resume tail is kept until every
  // contributor has its commit handed over or was given up, and the resume
  // grace has passed since that was first seen (CheckDeadline).
  std::optional<absl::Time> all_commits_sent_at_ ABSL_GUARDED_BY(mu_);
  bool complete_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ByteBuffer commit_frame_ ABSL_GUARDED_BY(mu_);
  // Direct rounds: the claims, once every end is in; how many ranks
  // confirmed their delivery; for ALL_REDUCE, the rank whose delivery
  // first named the result's digest (in result_digest_).
  std::optional<grpc::ByteBuffer> claims_frame_ ABSL_GUARDED_BY(mu_);
  int deliveries_ ABSL_GUARDED_BY(mu_) = 0;
  int result_reporter_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Status status_ ABSL_GUARDED_BY(mu_);  // first failure
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_RELAY_ROUND_H_
