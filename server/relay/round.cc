#include "server/relay/round.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/bounded_text.h"
#include "common/data_plane_name.h"
#include "common/frame_codec.h"
#include "common/status_macros.h"

namespace fedgather::server {

Round::Round(RoundOptions options, std::unique_ptr<RoundRecorder> recorder)
    : options_(std::move(options)),
      world_(static_cast<int>(options_.identities.size())),
      recorder_(std::move(recorder)),
      agreement_(Describe(), options_.identities),
      ledger_(world_, options_.min_quorum),
      result_hasher_(options_.digest),
      ranks_(options_.identities.size()),
      log_(FanOutLogOptions{world_, options_.max_buffered_bytes,
                            options_.resume_grace > absl::ZeroDuration(),
                            options_.resume_window_bytes}) {}

bool Round::RecordedLocked(const absl::Status& recorded,
                           PendingCallbacks* callbacks) {
  if (recorded.ok()) return true;
  FailLocked(absl::Status(
                 recorded.code(),
                 absl::StrCat(Describe(), ": the server could not journal it: ",
                              recorded.message())),
             callbacks);
  return false;
}

std::string Round::Describe() const {
  return absl::StrCat("group '", options_.group, "' epoch ", options_.epoch,
                      " seq ", options_.seq);
}

std::string Round::RankName(int rank) const {
  return absl::StrCat("rank ", rank, " (", options_.identities[rank], ")");
}

int64_t Round::BufferedBytes() const {
  absl::MutexLock lock(&mu_);
  return log_.BufferedBytes();
}

int64_t Round::TailBytes() const {
  absl::MutexLock lock(&mu_);
  return log_.TailBytes();
}

ServerEvent Round::MakeEvent(EventKind kind, int rank) const {
  ServerEvent event;
  event.kind = kind;
  event.group = options_.group;
  event.epoch = options_.epoch;
  event.seq = options_.seq;
  event.op = agreement_.op();
  event.rank = rank;
  if (rank >= 0) {
    event.identity = options_.identities[rank];
    event.peer = ranks_[rank].peer;
  }
  return event;
}

Round::Progress Round::GetProgress() const {
  absl::MutexLock lock(&mu_);
  Progress progress;
  progress.seq = options_.seq;
  for (int r = 0; r < world_; ++r) {
    if (ledger_.started(r)) progress.started.push_back(r);
    if (ledger_.ended(r)) progress.complete.push_back(r);
    progress.bytes_in.push_back(ranks_[r].received_bytes);
    progress.bytes_out.push_back(ranks_[r].sent_bytes);
  }
  progress.buffered_bytes = log_.BufferedBytes();
  progress.deadline = options_.deadline;
  return progress;
}

void Round::Wake(int rank, PendingCallbacks* callbacks) {
  std::weak_ptr<RoundStream> weak = ranks_[rank].stream;
  callbacks->Add([weak] {
    if (std::shared_ptr<RoundStream> stream = weak.lock()) stream->WakeWriter();
  });
}

void Round::WakeAll(PendingCallbacks* callbacks) {
  for (int r = 0; r < world_; ++r) {
    if (ledger_.started(r)) Wake(r, callbacks);
  }
}

absl::Status Round::ShutOutErrorLocked(int rank) const {
  return absl::FailedPreconditionError(absl::StrCat(
      Describe(), " closed at its quorum deadline of ",
      absl::FormatDuration(options_.quorum_wait), " with ",
      ledger_.contributors(), " of ", world_, " ranks; ", RankName(rank),
      " came too late and is not part of it; its next collective is seq ",
      options_.seq + 1));
}

absl::Status Round::Attach(AttachRequest request, PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  return AttachLocked(std::move(request), callbacks);
}

absl::Status Round::AttachLocked(AttachRequest request,
                                 PendingCallbacks* callbacks) {
  const int rank = request.rank;
  const v1::CollectiveHeader& header = request.header;
  const Fingerprint& fingerprint = request.fingerprint;
  if (!status_.ok()) return status_;
  RankState& state = ranks_[rank];
  if (ledger_.shut_out(rank)) return ShutOutErrorLocked(rank);
  if (complete_) {
    return absl::FailedPreconditionError(
        absl::StrCat(Describe(), " has already completed"));
  }
  if (ledger_.started(rank)) {
    return absl::FailedPreconditionError(
        absl::StrCat(Describe(), ": ", RankName(rank),
                     " already has a stream in this round"));
  }
  absl::Status valid = agreement_.Check(rank, header, fingerprint);
  if (valid.ok() && !agreement_.Agreed() && header.op() == v1::ALL_REDUCE) {
    absl::StatusOr<std::unique_ptr<Reducer>> reducer = Reducer::Create(
        header.reduce(), fingerprint, world_, options_.max_chunk_bytes);
    if (reducer.ok()) {
      reducer_ = *std::move(reducer);
      weights_.assign(world_, 1.0);
    } else {
      valid = absl::InvalidArgumentError(absl::StrCat(
          Describe(), ": ", RankName(rank), ": ", reducer.status().message()));
    }
  }
  if (valid.ok()) valid = agreement_.CheckWeight(rank, header);
  if (!valid.ok()) {
    FailLocked(valid, callbacks);
    return valid;
  }
  if (recorder_ != nullptr &&
      !RecordedLocked(recorder_->Attached(rank, request.header_frame),
                      callbacks)) {
    return status_;
  }
  const double weight = header.weight();
  agreement_.Accept(rank, std::move(request.header),
                    std::move(request.fingerprint));
  if (agreement_.op() == v1::ALL_REDUCE) weights_[rank] = weight;
  const bool sends = agreement_.op() != v1::BROADCAST ||
                     rank == static_cast<int>(agreement_.root());
  ledger_.Start(rank);
  state.phase = RankPhase::kStreaming;
  state.peer = std::move(request.peer);
  state.stream = std::move(request.stream);
  state.expected_bytes = request.upload_bytes;
  ServerEvent started = MakeEvent(EventKind::kContributionStarted, rank);
  started.bytes = state.expected_bytes;
  DeferEvent(options_.events, std::move(started), callbacks);
  // The header goes to every other rank ahead of this rank's chunks, so an
  // ALL_GATHER_V receiver learns the part's shape before its bytes. On the
  // relay a broadcast's non-roots and an all_reduce's ranks need no one's
  // header; on the direct plane every rank needs every header before its
  // ring starts (every rank is then in the round, and an all_reduce's
  // weights are known).
  if (options_.direct || (sends && agreement_.op() != v1::ALL_REDUCE)) {
    const int64_t header_bytes =
        static_cast<int64_t>(request.header_frame.Length());
    Append(rank, std::move(request.header_frame), header_bytes, callbacks);
  }
  Wake(rank, callbacks);
  return absl::OkStatus();
}

absl::Status Round::EquivocationLocked(int rank,
                                       const absl::Status& equivocation,
                                       PendingCallbacks* callbacks) {
  ServerEvent event = MakeEvent(EventKind::kEquivocation, rank);
  event.status = equivocation;
  DeferEvent(options_.events, std::move(event), callbacks);
  FailLocked(equivocation, callbacks);
  return equivocation;
}

absl::StatusOr<Round::ResumePoint> Round::Resume(AttachRequest request,
                                                 PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  if (!status_.ok()) return status_;
  const int rank = request.rank;
  const uint64_t frames = request.header.frames_received();
  RankState& state = ranks_[rank];
  if (ledger_.shut_out(rank)) return ShutOutErrorLocked(rank);
  if (!ledger_.started(rank)) {  // the first header never arrived
    if (frames != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(Describe(), ": ", RankName(rank), " resumes after ",
                       frames, " frames but never had a stream"));
    }
    FG_RETURN_IF_ERROR(AttachLocked(std::move(request), callbacks));
    return ResumePoint{};
  }
  FG_RETURN_IF_ERROR(CheckResumableLocked(rank));
  absl::StatusOr<Digest> declared =
      CheckSameContributionLocked(request, callbacks);
  if (!declared.ok()) return declared.status();
  FG_RETURN_IF_ERROR(CheckRestoredFramesLocked(rank, frames, callbacks));
  absl::StatusOr<int64_t> resent = ReclaimLocked(rank, frames, callbacks);
  if (!resent.ok()) return resent.status();
  state.phase = RankPhase::kStreaming;
  state.peer = std::move(request.peer);
  state.stream = std::move(request.stream);
  state.write_in_flight = false;
  state.read_paused = false;  // a new stream reads until it is paused
  ResumePoint point;
  point.upload_bytes = state.received_bytes;
  point.upload_ended = ledger_.ended(rank);
  point.hasher = std::move(state.upload_hasher);
  ServerEvent resumed = MakeEvent(EventKind::kStreamResumed, rank);
  resumed.details = {{"frames_received", absl::StrCat(frames)},
                     {"upload_bytes", absl::StrCat(point.upload_bytes)},
                     {"download_bytes_resent", absl::StrCat(*resent)}};
  DeferEvent(options_.events, std::move(resumed), callbacks);
  Wake(rank, callbacks);
  return point;
}

absl::Status Round::CheckResumableLocked(int rank) {
  RankState& state = ranks_[rank];
  if (state.phase == RankPhase::kLost) {
    return absl::UnavailableError(
        absl::StrCat(Describe(), ": ", RankName(rank),
                     " did not resume its collective stream within ",
                     absl::FormatDuration(options_.resume_grace)));
  }
  if (state.phase == RankPhase::kCommitSent && state.stream.expired()) {
    // Its stream finished with the commit, but the client resumes: the
    // commit did not arrive. Resume it like a broken stream.
    TakeBackCommitLocked(state);
    state.phase = RankPhase::kDetached;
  }
  if (state.phase != RankPhase::kDetached) {
    absl::Status retry = absl::UnavailableError(
        absl::StrCat(Describe(), ": ", RankName(rank),
                     "'s previous stream is still open; retry"));
    retry.SetPayload(kRetryPayload, absl::Cord("1"));
    return retry;
  }
  return absl::OkStatus();
}

absl::StatusOr<Digest> Round::CheckSameContributionLocked(
    const AttachRequest& request, PendingCallbacks* callbacks) {
  bool equivocation = false;
  absl::StatusOr<Digest> declared =
      agreement_.CheckResume(request.rank, request.header, request.fingerprint,
                             ledger_.digest(request.rank), &equivocation);
  if (!declared.ok() && equivocation) {
    return EquivocationLocked(request.rank, declared.status(), callbacks);
  }
  return declared;
}

absl::Status Round::CheckRestoredFramesLocked(int rank, uint64_t frames,
                                              PendingCallbacks* callbacks) {
  RankState& state = ranks_[rank];
  if (state.restored_frames < 0) return absl::OkStatus();
  if (static_cast<int64_t>(frames) > state.restored_frames) {
    const absl::Status lost = absl::DataLossError(absl::StrCat(
        Describe(), ": ", RankName(rank), " resumes after ", frames,
        " frames, but the server's journal held ", state.restored_frames,
        " for it after the restart (frames that had not reached the disk "
        "were lost); run the collective again"));
    FailLocked(lost, callbacks);
    return lost;
  }
  state.restored_frames = -1;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Round::ReclaimLocked(int rank, uint64_t frames,
                                             PendingCallbacks* callbacks) {
  const std::optional<size_t> cursor = log_.ResumeCursor(rank, frames);
  if (!cursor.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(), ": ", RankName(rank), " resumes after ",
                     frames, " frames, more than it was sent"));
  }
  bool released = false;
  const std::optional<int64_t> resent = log_.Reclaim(rank, *cursor, &released);
  if (released) ResumeReadersLocked(callbacks);
  if (!resent.has_value()) {
    const absl::Status gone = absl::UnavailableError(absl::StrCat(
        Describe(), ": ", RankName(rank), " resumed after ", frames,
        " frames, but the frames after those were already released (the "
        "resume window is ",
        options_.resume_window_bytes, " bytes)"));
    FailLocked(gone, callbacks);
    return gone;
  }
  return *resent;
}

bool Round::Append(int rank, grpc::ByteBuffer frame, int64_t bytes,
                   PendingCallbacks* callbacks) {
  // Every contributor but the sender (all ranks until a quorum closes).
  const int contributors = ledger_.contributors();
  const int receivers = rank == kEveryRank ? contributors : contributors - 1;
  if (!log_.Append(rank, std::move(frame), bytes, receivers)) return false;
  for (int r = 0; r < world_; ++r) {
    if (r != rank && ledger_.started(r)) Wake(r, callbacks);
  }
  return true;
}

int64_t Round::HeldLocked() const {
  return log_.BufferedBytes() +
         (reducer_ != nullptr ? reducer_->HeldBytes() : 0);
}

bool Round::PauseIfFullLocked(int rank) {
  if (HeldLocked() < options_.max_buffered_bytes) return true;
  ranks_[rank].read_paused = true;
  return false;
}

void Round::CountReceivedLocked(int rank, int64_t bytes) {
  ranks_[rank].received_bytes += bytes;
  if (options_.metrics == nullptr) return;
  options_.metrics->BytesIn(options_.group, bytes);
  if (!first_chunk_seen_) {
    first_chunk_seen_ = true;
    options_.metrics->FirstChunk(options_.group,
                                 options_.clock->Now() - options_.started);
  }
}

bool Round::RoomForFrameLocked(int rank, PendingCallbacks* callbacks) {
  if (log_.HasRoom()) return true;
  const int64_t most = log_.MaxFrames();
  FailLocked(
      absl::ResourceExhaustedError(absl::StrCat(
          Describe(), ": ", RankName(rank), " sent chunk ",
          ranks_[rank].chunks + 1, ", but a round takes at most ", most,
          " frames from all ranks (--max-buffered-mib / ", kLogEntryBytes,
          " bytes); send bigger chunks, up to max_chunk_bytes")),
      callbacks);
  return false;
}

bool Round::AcceptChunkLocked(int rank, grpc::ByteBuffer frame,
                              int64_t payload_bytes,
                              PendingCallbacks* callbacks) {
  ++ranks_[rank].chunks;
  CountReceivedLocked(rank, payload_bytes);
  return Append(rank, std::move(frame), payload_bytes, callbacks);
}

bool Round::OfferChunk(int rank, grpc::ByteBuffer frame, int64_t payload_bytes,
                       PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  if (finished() || !RoomForFrameLocked(rank, callbacks)) return false;
  if (recorder_ != nullptr &&
      !RecordedLocked(recorder_->Chunk(rank, frame), callbacks)) {
    return false;
  }
  AcceptChunkLocked(rank, std::move(frame), payload_bytes, callbacks);
  return PauseIfFullLocked(rank);
}

void Round::ReplayChunk(int rank, grpc::ByteBuffer frame, int64_t payload_bytes,
                        int64_t journal_offset, PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  if (finished() || !RoomForFrameLocked(rank, callbacks)) return;
  const int64_t size = static_cast<int64_t>(frame.Length());
  if (!AcceptChunkLocked(rank, std::move(frame), payload_bytes, callbacks)) {
    return;  // nobody receives it
  }
  log_.MarkLastReplayed(journal_offset, size);
  log_.Spill(reducer_ != nullptr ? reducer_->HeldBytes() : 0);
}

absl::StatusOr<grpc::ByteBuffer> Round::FrameLocked(
    const FanOutLog::Entry& entry) const {
  if (!entry.spilled) return entry.frame;  // shares the slices
  if (recorder_ == nullptr) {
    return absl::InternalError("a replayed frame left memory with no journal");
  }
  return recorder_->ReadFrame(entry.journal_offset, entry.journal_size);
}

bool Round::OfferReduceChunk(int rank, const grpc::ByteBuffer& frame,
                             const ChunkMeta& meta, const uint8_t* data,
                             PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  if (finished()) return false;
  if (recorder_ != nullptr &&
      !RecordedLocked(recorder_->Chunk(rank, frame), callbacks)) {
    return false;
  }
  const int64_t size = static_cast<int64_t>(meta.size);
  CountReceivedLocked(rank, size);
  absl::StatusOr<Reducer::Added> added =
      reducer_->Add(rank, weights_[rank], static_cast<int>(meta.tensor_index),
                    static_cast<int64_t>(meta.offset), data, size);
  if (!added.ok()) {
    FailLocked(
        absl::InternalError(absl::StrCat(Describe(), ": ", RankName(rank), ": ",
                                         added.status().message())),
        callbacks);
    return false;
  }
  for (Reducer::FinishedChunk& chunk : added->finished) {
    AppendResultLocked(chunk.tensor, chunk.offset, std::move(chunk.data),
                       callbacks);
  }
  // A rank that only folded into elements another rank had started is
  // behind: it must never wait, or the ranks ahead (waiting for it) never
  // drain.
  return !added->ahead || PauseIfFullLocked(rank);
}

void Round::AppendResultLocked(int tensor, int64_t offset, std::string data,
                               PendingCallbacks* callbacks) {
  result_hasher_.Update(data.data(), data.size());
  ChunkMeta out;
  out.rank = static_cast<uint32_t>(world_);  // the result's "rank"
  out.tensor_index = static_cast<uint32_t>(tensor);
  out.offset = static_cast<uint64_t>(offset);
  const int64_t size = static_cast<int64_t>(data.size());
  Append(kEveryRank, EncodeOwnedChunkFrame(out, std::move(data)), size,
         callbacks);
}

void Round::ResumeReadersLocked(PendingCallbacks* callbacks) {
  if (HeldLocked() >= options_.max_buffered_bytes) return;
  for (RankState& state : ranks_) {
    if (!state.read_paused) continue;
    state.read_paused = false;
    std::weak_ptr<RoundStream> weak = state.stream;
    callbacks->Add([weak] {
      if (std::shared_ptr<RoundStream> s = weak.lock()) s->ResumeReading();
    });
  }
}

void Round::EndContribution(int rank, const Digest& digest,
                            PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  if (finished()) return;
  if (ledger_.ended(rank)) return;
  if (agreement_.DeclaredOther(rank, digest)) {
    // The round fails on every rank; the uploader learns it from its stream.
    EquivocationLocked(
        rank, agreement_.EquivocationError(rank, "different bytes"), callbacks)
        .IgnoreError();
    return;
  }
  if (recorder_ != nullptr &&
      !RecordedLocked(recorder_->Ended(rank, options_.digest, digest),
                      callbacks)) {
    return;
  }
  // A direct round's bytes never come here: the header declared them.
  const int64_t bytes = options_.direct ? ranks_[rank].expected_bytes
                                        : ranks_[rank].received_bytes;
  const bool last = ledger_.End(rank, digest, bytes);
  ServerEvent contributed = MakeEvent(EventKind::kContributionComplete, rank);
  contributed.bytes = bytes;
  contributed.digest_algorithm = DigestAlgorithmName(options_.digest);
  contributed.digest_hex = DigestToHex(digest);
  DeferEvent(options_.events, std::move(contributed), callbacks);
  if (!last) return;
  if (options_.direct) {
    ClaimLocked(callbacks);
  } else {
    CompleteLocked(callbacks);
  }
}

void Round::ClaimLocked(PendingCallbacks* callbacks) {
  claims_frame_ = ContributionsFrameLocked(/*claims=*/true);
  WakeAll(callbacks);
}

absl::Status Round::ConfirmDelivery(int rank, absl::string_view result_digest,
                                    PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  if (!status_.ok()) return status_;
  RankState& state = ranks_[rank];
  if (!options_.direct || !state.claims_sent || state.delivered) {
    return absl::FailedPreconditionError(absl::StrCat(
        Describe(), ": ", RankName(rank), " sent a Delivery ",
        !options_.direct  ? "in a round that is not direct"
        : state.delivered ? "twice"
                          : "before the server sent it the claims"));
  }
  if (agreement_.op() == v1::ALL_REDUCE) {
    // Every rank must end with the same result: the commit names it.
    Digest digest;
    if (!DigestFromBytes(result_digest, &digest)) {
      return absl::InvalidArgumentError(absl::StrCat(
          Describe(), ": ", RankName(rank),
          "'s Delivery of an ALL_REDUCE must name its result's digest "
          "(Delivery.result_digest, 32 bytes)"));
    }
    if (result_reporter_ < 0) {
      result_reporter_ = rank;
      result_digest_ = digest;
    } else if (digest != result_digest_) {
      const absl::Status differs = absl::DataLossError(absl::StrCat(
          Describe(), ": the ranks' results differ: ", RankName(rank),
          "'s hashes to ", DigestToHex(digest), " but ",
          RankName(result_reporter_), "'s to ", DigestToHex(result_digest_),
          " (a rank changed a segment it reduced or forwarded)"));
      FailLocked(differs, callbacks);
      return differs;
    }
  }
  state.delivered = true;
  if (++deliveries_ == ledger_.contributors()) CompleteLocked(callbacks);
  return absl::OkStatus();
}

void Round::CompleteLocked(PendingCallbacks* callbacks) {
  complete_ = true;
  if (agreement_.op() == v1::ALL_REDUCE && !options_.direct) {
    result_digest_ = result_hasher_.Finish();
  }
  commit_frame_ = ContributionsFrameLocked(/*claims=*/false);
  ServerEvent committed = MakeEvent(EventKind::kRoundCompleted, -1);
  committed.digest_algorithm = DigestAlgorithmName(options_.digest);
  if (agreement_.op() == v1::ALL_REDUCE)
    committed.digest_hex = DigestToHex(result_digest_);
  std::vector<std::string> shut_out;
  for (int r = 0; r < world_; ++r) {
    if (ledger_.shut_out(r)) {
      shut_out.push_back(RankName(r));
      continue;
    }
    committed.contributions.push_back(
        ContributionDigest{r, options_.identities[r],
                           DigestToHex(*ledger_.digest(r)), ledger_.bytes(r)});
    committed.bytes += ledger_.bytes(r);
  }
  if (!shut_out.empty()) {
    committed.details.emplace_back(
        "quorum", absl::StrCat(ledger_.contributors(), " of ", world_,
                               " (min_quorum ", options_.min_quorum, ")"));
    committed.details.emplace_back("shut_out", absl::StrJoin(shut_out, ", "));
  }
  DeferEvent(options_.events, std::move(committed), callbacks);
  if (options_.on_finished) {
    auto on_finished = options_.on_finished;
    const uint64_t seq = options_.seq;
    callbacks->Add([on_finished, seq] { on_finished(seq, absl::OkStatus()); });
  }
  WakeAll(callbacks);
}

grpc::ByteBuffer Round::ContributionsFrameLocked(bool claims) const {
  v1::CollectiveFrame frame;
  v1::Commit* commit = claims ? frame.mutable_claims() : frame.mutable_commit();
  commit->set_group(options_.group);
  commit->set_epoch(options_.epoch);
  commit->set_seq(options_.seq);
  ledger_.AddContributions(options_.identities, commit);
  if (agreement_.op() == v1::ALL_REDUCE) {
    commit->set_result_digest(DigestBytes(result_digest_));
  }
  commit->set_digest_algorithm(DigestAlgorithmToProto(options_.digest));
  return EncodeFrame(frame);
}

Outgoing Round::NextOutgoing(int rank, PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  Outgoing out;
  if (!status_.ok()) {
    out.kind = Outgoing::Kind::kFinish;
    out.status = status_;
    return out;
  }
  RankState& state = ranks_[rank];
  if (state.write_in_flight) return out;  // WriteDone has not run yet
  if (state.phase == RankPhase::kLost) {
    // The receiver is gone from a completed round: drop its claims on the
    // log so the frames can be released.
    DropClaimsLocked(rank, callbacks);
    out.kind = Outgoing::Kind::kFinish;
    out.status = absl::CancelledError("the stream closed");
    return out;
  }
  if (const FanOutLog::Entry* next = log_.Next(rank); next != nullptr) {
    absl::StatusOr<grpc::ByteBuffer> frame = FrameLocked(*next);
    if (!frame.ok()) {
      FailLocked(absl::DataLossError(
                     absl::StrCat(Describe(), ": ", frame.status().message())),
                 callbacks);
      out.kind = Outgoing::Kind::kFinish;
      out.status = status_;
      return out;
    }
    state.write_in_flight = true;
    out.kind = Outgoing::Kind::kFrame;
    out.frame = *std::move(frame);
    return out;
  }
  if (claims_frame_.has_value() && !complete_ && !state.claims_sent &&
      state.phase == RankPhase::kStreaming) {
    state.claims_sent = true;
    state.claims_in_flight = true;
    state.write_in_flight = true;
    out.kind = Outgoing::Kind::kFrame;
    out.frame = *claims_frame_;
    return out;
  }
  if (complete_ && state.phase == RankPhase::kStreaming) {
    state.phase = RankPhase::kCommitSent;
    out.kind = Outgoing::Kind::kCommitAndFinish;
    out.frame = commit_frame_;
  }
  return out;
}

void Round::TakeBackCommitLocked(RankState& state) {
  if (state.phase != RankPhase::kCommitSent) return;
  state.phase = RankPhase::kStreaming;
  all_commits_sent_at_.reset();
}

bool Round::SettledLocked(absl::Time now) {
  for (int r = 0; r < world_; ++r) {
    const RankPhase phase = ranks_[r].phase;
    if (!ledger_.shut_out(r) && phase != RankPhase::kCommitSent &&
        phase != RankPhase::kLost) {
      return false;
    }
  }
  if (!all_commits_sent_at_.has_value()) all_commits_sent_at_ = now;
  return now - *all_commits_sent_at_ >= options_.resume_grace;
}

void Round::ReleaseTailAfterGraceLocked(absl::Time now) {
  if (!log_.HasTail() || !SettledLocked(now)) return;
  log_.ReleaseTail();
}

void Round::DropClaimsLocked(int rank, PendingCallbacks* callbacks) {
  if (log_.DropClaims(rank)) ResumeReadersLocked(callbacks);
}

void Round::WriteDone(int rank, bool ok, PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  RankState& state = ranks_[rank];
  if (!state.write_in_flight) return;
  state.write_in_flight = false;
  if (!status_.ok()) return;  // the log was already released
  if (state.claims_in_flight) {
    // The claims are not in the log; a failed write loses the stream
    // (StreamLost), which a direct round does not resume.
    state.claims_in_flight = false;
    return;
  }
  // A resumable stream that failed a write is about to be detached
  // (StreamLost); the frame stays claimed for the stream that resumes.
  if (!ok && options_.resume_grace > absl::ZeroDuration()) return;
  bool released = false;
  const int64_t bytes = log_.Written(rank, &released);
  if (ok) {
    state.sent_bytes += bytes;
    if (options_.metrics != nullptr) {
      options_.metrics->BytesOut(options_.group, bytes);
    }
  }
  if (released) ResumeReadersLocked(callbacks);
  if (!ok && state.phase != RankPhase::kLost) {
    state.phase = RankPhase::kLost;
    if (!complete_) {
      FailLocked(absl::UnavailableError(absl::StrCat(
                     Describe(), ": ", RankName(rank),
                     " stopped receiving before the round completed")),
                 callbacks);
    } else {
      // Its stream calls into the round no more: give up its claims here.
      DropClaimsLocked(rank, callbacks);
    }
  }
}

void Round::StreamLost(int rank, absl::string_view why, absl::Time now,
                       PendingCallbacks* callbacks,
                       std::optional<ContentHasher> hasher) {
  absl::MutexLock lock(&mu_);
  RankState& state = ranks_[rank];
  if (state.phase == RankPhase::kLost || state.phase == RankPhase::kDetached) {
    return;
  }
  const bool resumable = options_.resume_grace > absl::ZeroDuration();
  // Without resumes, a commit handed over is as good as delivered.
  if (state.phase == RankPhase::kCommitSent && !resumable) return;
  if (resumable && status_.ok()) {
    // The commit, if handed over, may not have arrived: the rank may resume
    // and gets it again.
    TakeBackCommitLocked(state);
    state.phase = RankPhase::kDetached;
    state.detached_at = now;
    state.write_in_flight = false;
    state.upload_hasher = std::move(hasher);
    state.stream.reset();
    return;
  }
  state.phase = RankPhase::kLost;
  if (complete_) {
    // The stream calls into the round no more, so its claims on the frames
    // it did not write go now (else they stay counted and held until the
    // round is freed).
    state.write_in_flight = false;
    DropClaimsLocked(rank, callbacks);
    return;
  }
  FailLocked(
      absl::UnavailableError(absl::StrCat(Describe(), ": ", RankName(rank), " ",
                                          why, " before the round completed")),
      callbacks);
}

void Round::Fail(const absl::Status& status, PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  FailLocked(status, callbacks);
}

absl::Status Round::Failure() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

void Round::FailLocked(const absl::Status& status,
                       PendingCallbacks* callbacks) {
  if (finished()) return;
  // What every rank is told, the outcome kept and the event: bounded.
  status_ = BoundStatus(status);
  log_.Clear();
  ServerEvent failed = MakeEvent(EventKind::kRoundFailed, -1);
  failed.status = status_;
  DeferEvent(options_.events, std::move(failed), callbacks);
  if (options_.on_finished) {
    auto on_finished = options_.on_finished;
    const uint64_t seq = options_.seq;
    callbacks->Add(
        [on_finished, seq, status = status_] { on_finished(seq, status); });
  }
  WakeAll(callbacks);
}

std::string Round::ProgressLocked() const {
  std::vector<std::string> missing;
  std::vector<int> done;
  for (int r = 0; r < world_; ++r) {
    const RankState& state = ranks_[r];
    if (ledger_.ended(r)) {
      done.push_back(r);
    } else if (!ledger_.started(r)) {
      missing.push_back(absl::StrCat(RankName(r), ": not started"));
    } else {
      missing.push_back(absl::StrCat(RankName(r), ": ", state.received_bytes,
                                     " of ", state.expected_bytes, " bytes"));
    }
  }
  return absl::StrCat("missing contributions: ", absl::StrJoin(missing, "; "),
                      done.empty() ? ""
                                   : absl::StrCat("; complete: ranks ",
                                                  absl::StrJoin(done, ", ")));
}

void Round::CheckDeadline(absl::Time now, PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  for (int r = 0; r < world_ && status_.ok(); ++r) {
    RankState& state = ranks_[r];
    if (state.phase != RankPhase::kDetached ||
        now - state.detached_at < options_.resume_grace) {
      continue;
    }
    state.phase = RankPhase::kLost;
    if (complete_) {
      DropClaimsLocked(r, callbacks);  // it will not come back for them
      continue;
    }
    FailLocked(absl::UnavailableError(absl::StrCat(
                   Describe(), ": ", RankName(r),
                   " lost its collective stream and did not resume it within ",
                   absl::FormatDuration(options_.resume_grace))),
               callbacks);
  }
  if (complete_ && status_.ok()) ReleaseTailAfterGraceLocked(now);
  if (finished()) return;
  if (now < options_.deadline) {
    if (now >= options_.quorum_deadline && !ledger_.closed()) {
      CloseQuorumLocked(callbacks);
    }
    return;
  }
  FailLocked(
      absl::DeadlineExceededError(absl::StrCat(
          Describe(), " exceeded its deadline of ",
          absl::FormatDuration(options_.timeout), "; ", ProgressLocked())),
      callbacks);
}

void Round::CloseQuorumLocked(PendingCallbacks* callbacks) {
  const std::optional<int> root =
      agreement_.op() == v1::BROADCAST
          ? std::optional<int>(static_cast<int>(agreement_.root()))
          : std::nullopt;
  const ContributionLedger::Closing closing = ledger_.CheckClose(root);
  if (closing == ContributionLedger::Closing::kNothingToClose) return;
  const int count = ledger_.StartedCount();
  const std::string why = absl::StrCat(
      Describe(), " reached its quorum deadline of ",
      absl::FormatDuration(options_.quorum_wait), " with ", count, " of ",
      world_, " ranks started (min_quorum ", options_.min_quorum, ")");
  if (closing == ContributionLedger::Closing::kBelowQuorum) {
    FailLocked(absl::DeadlineExceededError(
                   absl::StrCat(why, ", below quorum; ", ProgressLocked())),
               callbacks);
    return;
  }
  if (closing == ContributionLedger::Closing::kWithoutRoot) {
    FailLocked(absl::DeadlineExceededError(
                   absl::StrCat(why, ", but not the broadcast's root ",
                                RankName(*root), "; ", ProgressLocked())),
               callbacks);
    return;
  }
  if (recorder_ != nullptr &&
      !RecordedLocked(recorder_->QuorumClosed(), callbacks)) {
    return;
  }
  // The ranks that have not started are no longer receivers: drop their
  // claims on the log, and let the reduction finish without them.
  const std::vector<bool> contributors = ledger_.Close();
  if (log_.DropReceivers(world_ - ledger_.contributors())) {
    ResumeReadersLocked(callbacks);
  }
  if (reducer_ != nullptr) {
    for (Reducer::FinishedChunk& chunk :
         reducer_->CloseContributors(contributors)) {
      AppendResultLocked(chunk.tensor, chunk.offset, std::move(chunk.data),
                         callbacks);
    }
  }
  if (ledger_.AllEnded()) CompleteLocked(callbacks);
}

void Round::CloseQuorum(PendingCallbacks* callbacks) {
  absl::MutexLock lock(&mu_);
  if (!finished() && !ledger_.closed()) CloseQuorumLocked(callbacks);
}

void Round::Restored(absl::Time now, std::vector<ContentHasher> upload_hashers,
                     std::unique_ptr<RoundRecorder> recorder) {
  absl::MutexLock lock(&mu_);
  recorder_ = std::move(recorder);
  for (int r = 0; r < world_; ++r) {
    if (!ledger_.started(r)) continue;
    RankState& state = ranks_[r];
    state.phase = RankPhase::kDetached;
    state.detached_at = now;
    state.read_paused = false;
    state.upload_hasher = std::move(upload_hashers[r]);
    state.restored_frames = log_.FramesFor(r);
  }
}

void Round::StartResumeGrace(absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (RankState& state : ranks_) {
    if (state.phase == RankPhase::kDetached)
      state.detached_at = std::max(state.detached_at, now);
  }
}

bool Round::Finished() const {
  absl::MutexLock lock(&mu_);
  return finished();
}

bool Round::Complete() const {
  absl::MutexLock lock(&mu_);
  return complete_;
}

bool Round::Settled(absl::Time now) {
  absl::MutexLock lock(&mu_);
  return complete_ && status_.ok() && SettledLocked(now);
}

}  // namespace fedgather::server
