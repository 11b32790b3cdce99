#include "client/collective_call.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace fedgather {

CollectiveCall::CollectiveCall(CollectiveSetup setup,
                               absl::Span<const ConstHostTensor> inputs,
                               ReceiveTarget* target)
    : setup_(std::move(setup)),
      inputs_(inputs),
      target_(target),
      own_hasher_(setup_.digest) {}

absl::Status CollectiveCall::Prepare() {
  v1::CollectiveFrame header_frame;
  v1::CollectiveHeader* header = header_frame.mutable_header();
  header->set_group(setup_.group);
  header->set_epoch(setup_.epoch);
  header->set_seq(setup_.seq);
  header->set_op(setup_.op);
  header->set_rank(setup_.rank);
  header->set_digest_algorithm(DigestAlgorithmToProto(setup_.digest));
  header->set_data_plane(setup_.data_plane);
  if (setup_.op == v1::BROADCAST) {
    if (setup_.root < 0 || setup_.root >= setup_.world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("root ", setup_.root, " is out of range for world size ",
                       setup_.world_size));
    }
    header->set_root(static_cast<uint32_t>(setup_.root));
  }
  if (setup_.op == v1::ALL_REDUCE) {
    header->set_reduce(setup_.reduce);
    header->set_weight(setup_.weight);
  }
  if (setup_.upload_chunk_bytes < 0 ||
      setup_.upload_chunk_bytes > setup_.max_chunk_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("upload_chunk_bytes ", setup_.upload_chunk_bytes,
                     " must be 0 (the server's chunk limit) or 1 to ",
                     setup_.max_chunk_bytes));
  }
  for (const ConstHostTensor& input : inputs_) {
    fingerprint_.push_back(input.spec);
  }
  FingerprintToProto(fingerprint_, header->mutable_tensors());
  // The server applies the same checks; failing here sends nothing.
  FG_RETURN_IF_ERROR(FingerprintFromProto(header->tensors(), "input").status());
  FG_RETURN_IF_ERROR(CheckFingerprintForOp(setup_.op, fingerprint_, "input"));
  if (setup_.op == v1::ALL_REDUCE) {
    FG_RETURN_IF_ERROR(CheckReducible(setup_.reduce, fingerprint_));
  }
  // A BROADCAST's non-root sends its header only.
  if (!Sends(setup_.rank)) write_tensor_ = inputs_.size();
  for (const ConstHostTensor& input : inputs_) {
    input_bytes_.push_back(ByteSize(input.spec).value());
    if (input.data == nullptr && input_bytes_.back() > 0 &&
        Sends(setup_.rank)) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", input.spec.name, "' has no data"));
    }
  }
  parts_.reserve(setup_.world_size + 1);
  for (int r = 0; r < setup_.world_size; ++r) {
    parts_.emplace_back(setup_.digest);
  }
  if (setup_.op == v1::ALL_REDUCE) {
    // Nothing of this rank's goes to the target; the result does.
    Part& result = parts_.emplace_back(setup_.digest);
    result.fingerprint = fingerprint_;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      FG_ASSIGN_OR_RETURN(uint8_t * dest,
                          target_->Place(setup_.world_size, static_cast<int>(i),
                                         inputs_[i].spec));
      result.dest.push_back(dest);
    }
    result.sequence.emplace(result.fingerprint, setup_.max_chunk_bytes);
    result.have_header = true;
  }
  for (size_t i = 0; i < inputs_.size() && setup_.op != v1::ALL_REDUCE; ++i) {
    FG_ASSIGN_OR_RETURN(
        uint8_t * own,
        target_->Place(setup_.rank, static_cast<int>(i), inputs_[i].spec));
    if (input_bytes_[i] > 0 && own != inputs_[i].data && Sends(setup_.rank)) {
      std::memcpy(own, inputs_[i].data, static_cast<size_t>(input_bytes_[i]));
    }
  }
  header_frame_ = std::move(header_frame);
  return absl::OkStatus();
}

void CollectiveCall::Start(DataPlane* plane) {
  plane_ = plane;
  StartAttempt(/*resume=*/false);
}

void CollectiveCall::StartAttempt(bool resume) {
  v1::CollectiveFrame frame = header_frame_;
  if (resume) {
    v1::CollectiveHeader* header = frame.mutable_header();
    header->set_resume(true);
    header->set_frames_received(frames_received_);
    if (!own_digest_known_) {
      own_digest_ = ContributionDigest();
      own_digest_known_ = true;
    }
    header->set_contribution_digest(DigestBytes(own_digest_));
  }
  ++stats_.streams;
  attempt_ = std::make_unique<Attempt>(this, resume);
  attempt_->Start(plane_, EncodeFrame(frame));
}

void CollectiveCall::Attempt::Start(DataPlane* plane, grpc::ByteBuffer header) {
  stream_ = plane->Open(std::move(header), this);
  stream_->Start();
}

Digest CollectiveCall::ContributionDigest() const {
  ContentHasher hasher(setup_.digest);
  if (Sends(setup_.rank)) {
    for (size_t i = 0; i < inputs_.size(); ++i) {
      hasher.Update(inputs_[i].data, static_cast<size_t>(input_bytes_[i]));
    }
  }
  return hasher.Finish();
}

bool CollectiveCall::Sends(int rank) const {
  return setup_.op != v1::BROADCAST || rank == setup_.root;
}

void CollectiveCall::WriteNext(Attempt* attempt) {
  while (write_tensor_ < inputs_.size() &&
         write_offset_ == input_bytes_[write_tensor_]) {
    ++write_tensor_;
    write_offset_ = 0;
  }
  if (write_tensor_ < inputs_.size()) {
    if (setup_.break_after_bytes_sent >= 0 && stats_.streams == 1 &&
        stats_.payload_bytes_sent >= setup_.break_after_bytes_sent) {
      attempt->Cancel();  // the test hook: a broken connection
      return;
    }
    const int64_t left = input_bytes_[write_tensor_] - write_offset_;
    ChunkMeta meta;
    meta.rank = static_cast<uint32_t>(setup_.rank);
    meta.tensor_index = static_cast<uint32_t>(write_tensor_);
    meta.offset = static_cast<uint64_t>(write_offset_);
    const int64_t chunk = setup_.upload_chunk_bytes > 0
                              ? setup_.upload_chunk_bytes
                              : setup_.max_chunk_bytes;
    meta.size = static_cast<uint64_t>(std::min(left, chunk));
    const uint8_t* data =
        static_cast<const uint8_t*>(inputs_[write_tensor_].data) +
        write_offset_;
    if (!own_digest_known_) own_hasher_.Update(data, meta.size);
    grpc::ByteBuffer chunk_frame = EncodeChunkFrame(meta, data);
    write_offset_ += static_cast<int64_t>(meta.size);
    stats_.payload_bytes_sent += static_cast<int64_t>(meta.size);
    if (setup_.progress != nullptr) {
      setup_.progress->payload_bytes_sent += static_cast<int64_t>(meta.size);
    }
    attempt->Write(std::move(chunk_frame));
    return;
  }
  if (!end_sent_) {
    end_sent_ = true;
    if (!own_digest_known_) {
      own_digest_ = own_hasher_.Finish();
      own_digest_known_ = true;
    }
    v1::CollectiveFrame frame;
    frame.mutable_end()->set_rank(setup_.rank);
    frame.mutable_end()->set_digest(DigestBytes(own_digest_));
    attempt->Write(EncodeFrame(frame));
    return;
  }
  attempt->WritesDone();
}

void CollectiveCall::Attempt::OnWritten(bool ok) {
  // A failed write loses data the server may never get. The stream can
  // still read on (seen when gRPC retried the call on a new connection after
  // a transport closed under it), so end it: OnEnded then brings a status
  // that is not final, and the call resumes on a new stream.
  if (!ok) {
    write_failed_ = true;
    Cancel();
    return;
  }
  if (resume_) {
    absl::MutexLock lock(&mu_);
    if (!header_written_) {
      header_written_ = true;
      if (!position_known_) return;  // HandleResumed starts the upload
    }
  }
  call_->WriteNext(this);
}

bool CollectiveCall::Attempt::OnFrame(grpc::ByteBuffer& frame) {
  if (call_->setup_.liveness != nullptr) {
    call_->setup_.liveness->Heard(call_->setup_.clock->Now());
  }
  return call_->HandleRead(this, frame);
}

void CollectiveCall::Attempt::OnEnded(const grpc::Status& final_status,
                                      bool final) {
  status = write_failed_ && final_status.error_code() == grpc::CANCELLED
               ? grpc::Status(grpc::UNAVAILABLE,
                              "the collective stream to the server broke: a "
                              "write failed")
               : final_status;
  server_final = final;
  done.Notify();
}

bool CollectiveCall::HandleRead(Attempt* attempt, grpc::ByteBuffer& frame) {
  if (absl::Status handled = HandleFrame(attempt, frame); !handled.ok()) {
    Abort(attempt, handled);
    return false;
  }
  if (setup_.break_after_frames_received >= 0 && stats_.streams == 1 &&
      static_cast<int64_t>(frames_received_) >=
          setup_.break_after_frames_received) {
    attempt->Cancel();  // the test hook: a broken connection
    return false;
  }
  return true;
}

void CollectiveCall::Abort(Attempt* attempt, const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (error_.ok()) error_ = status;
  }
  attempt->Cancel();
}

absl::Status CollectiveCall::HandleFrame(Attempt* attempt,
                                         grpc::ByteBuffer& received) {
  v1::CollectiveFrame frame;
  DownloadSink sink(this);
  FG_ASSIGN_OR_RETURN(const v1::CollectiveFrame::KindCase kind,
                      DecodeFrame(received, &frame, &sink));
  switch (kind) {
    case v1::CollectiveFrame::kHeader:
      FG_RETURN_IF_ERROR(HandleHeader(frame.header()));
      ++frames_received_;
      if (setup_.progress != nullptr) ++setup_.progress->headers_received;
      return absl::OkStatus();
    case v1::CollectiveFrame::kChunk:  // the sink placed it
      ++frames_received_;
      return absl::OkStatus();
    case v1::CollectiveFrame::kResumed: {
      if (!attempt->resume_) {
        return absl::InternalError(
            "protocol error: Resumed on a stream that did not resume");
      }
      FG_RETURN_IF_ERROR(HandleResumed(frame.resumed()));
      bool header_written;
      {
        absl::MutexLock lock(&attempt->mu_);
        attempt->position_known_ = true;
        header_written = attempt->header_written_;
      }
      // Whichever of this and the header's write completion comes second
      // starts the upload.
      if (header_written) WriteNext(attempt);
      return absl::OkStatus();
    }
    case v1::CollectiveFrame::kCommit:
      return HandleCommit(frame.commit());
    default:
      return absl::InternalError(
          "protocol error: the server sent a frame clients never receive");
  }
}

absl::Status CollectiveCall::HandleHeader(const v1::CollectiveHeader& header) {
  const int r = static_cast<int>(header.rank());
  if (header.rank() >= static_cast<uint32_t>(setup_.world_size) ||
      r == setup_.rank || parts_[r].have_header || !Sends(r) ||
      setup_.op == v1::ALL_REDUCE) {
    return absl::InternalError(absl::StrCat(
        "protocol error: unexpected header for rank ", header.rank()));
  }
  Part& part = parts_[r];
  FG_ASSIGN_OR_RETURN(
      part.fingerprint,
      FingerprintFromProto(header.tensors(),
                           absl::StrCat("rank ", r, " header")));
  if (header.op() != setup_.op) {
    return absl::InternalError(
        absl::StrCat("protocol error: rank ", r, " ran ", OpName(header.op())));
  }
  FG_RETURN_IF_ERROR(CompareFingerprints(setup_.op, setup_.rank, fingerprint_,
                                         r, part.fingerprint));
  for (size_t i = 0; i < part.fingerprint.size(); ++i) {
    FG_ASSIGN_OR_RETURN(uint8_t * dest, target_->Place(r, static_cast<int>(i),
                                                       part.fingerprint[i]));
    part.dest.push_back(dest);
  }
  part.sequence.emplace(part.fingerprint, setup_.max_chunk_bytes);
  part.have_header = true;
  return absl::OkStatus();
}

absl::Status CollectiveCall::DownloadSink::Begin(const ChunkMeta& meta) {
  const int r = static_cast<int>(meta.rank);
  if (meta.rank >= call_->parts_.size() || r == call_->setup_.rank ||
      !call_->parts_[r].have_header) {
    return absl::InternalError(absl::StrCat("protocol error: chunk for rank ",
                                            meta.rank, " before its header"));
  }
  Part& part = call_->parts_[r];
  if (absl::Status placed =
          part.sequence->Accept(meta.tensor_index, meta.offset, meta.size);
      !placed.ok()) {
    return absl::DataLossError(
        absl::StrCat("rank ", r, "'s data: ", placed.message()));
  }
  dest_ = part.dest[meta.tensor_index] + meta.offset;
  hasher_ = &part.hasher;
  return absl::OkStatus();
}

void CollectiveCall::DownloadSink::Data(const uint8_t* data, size_t size) {
  std::memcpy(dest_, data, size);
  dest_ += size;
  hasher_->Update(data, size);
  call_->stats_.payload_bytes_received += static_cast<int64_t>(size);
  if (call_->setup_.progress != nullptr) {
    call_->setup_.progress->payload_bytes_received +=
        static_cast<int64_t>(size);
  }
}

absl::Status CollectiveCall::HandleResumed(const v1::Resumed& resumed) {
  int64_t left = static_cast<int64_t>(resumed.upload_bytes());
  int64_t total = 0;
  for (size_t i = 0; i < inputs_.size() && Sends(setup_.rank); ++i) {
    total += input_bytes_[i];
  }
  if (left > total || (resumed.upload_ended() && left != total)) {
    return absl::InternalError(absl::StrCat(
        "protocol error: the server resumes at byte ", left, " of ", total));
  }
  // The upload goes on from there (the digest is already known).
  end_sent_ = resumed.upload_ended();
  write_tensor_ = Sends(setup_.rank) ? 0 : inputs_.size();
  write_offset_ = 0;
  while (left > 0 && write_tensor_ < inputs_.size()) {
    const int64_t step = std::min(left, input_bytes_[write_tensor_]);
    left -= step;
    if (step < input_bytes_[write_tensor_]) {
      write_offset_ = step;
    } else {
      ++write_tensor_;
    }
  }
  return absl::OkStatus();
}

absl::Status CollectiveCall::HandleCommit(const v1::Commit& commit) {
  // The commit lists the contributors in rank order: every rank, or, when a
  // quorum round closed without some, the ranks that made it.
  absl::StatusOr<DigestAlgorithm> algorithm =
      DigestAlgorithmFromProto(commit.digest_algorithm(), "the commit");
  if (!algorithm.ok() || *algorithm != setup_.digest) {
    return absl::DataLossError(
        absl::StrCat("the commit names its digests in ",
                     algorithm.ok() ? DigestAlgorithmName(*algorithm)
                                    : algorithm.status().message(),
                     " but the epoch names contributions by ",
                     DigestAlgorithmName(setup_.digest)));
  }
  std::vector<bool> listed(setup_.world_size, false);
  int previous = -1;
  for (const v1::RankDigest& entry : commit.contributions()) {
    const int r = static_cast<int>(entry.rank());
    Digest committed;
    if (r <= previous || r >= setup_.world_size ||
        !DigestFromBytes(entry.digest(), &committed)) {
      return absl::DataLossError(absl::StrCat("the commit's entry for rank ",
                                              entry.rank(), " is malformed"));
    }
    previous = r;
    listed[r] = true;
    contributors_.push_back(r);
    Digest received = own_digest_;
    if (!Sends(r)) {
      received = HashContent(setup_.digest, nullptr, 0);  // it sent nothing
    } else if (setup_.op == v1::ALL_REDUCE && r != setup_.rank) {
      continue;  // its bytes went into the result, checked below
    } else if (r != setup_.rank) {
      Part& part = parts_[r];
      if (!part.have_header) {
        return absl::DataLossError(
            absl::StrCat("the commit arrived before rank ", r, "'s data"));
      }
      if (absl::Status complete = part.sequence->CheckComplete();
          !complete.ok()) {
        return absl::DataLossError(absl::StrCat(
            "rank ", r, " (", entry.identity(), "): ", complete.message()));
      }
      received = part.hasher.Finish();
    }
    if (received != committed) {
      return absl::DataLossError(
          absl::StrCat("rank ", r, " (", entry.identity(),
                       "): the received bytes hash to ", DigestToHex(received),
                       " but the commit says ", DigestToHex(committed)));
    }
  }
  if (!listed[setup_.rank]) {
    return absl::DataLossError(
        "the commit leaves this rank's contribution out");
  }
  for (int r = 0; r < setup_.world_size; ++r) {
    if (listed[r]) continue;
    if (parts_[r].have_header) {
      return absl::DataLossError(
          absl::StrCat("rank ", r, " sent data but the commit leaves it out"));
    }
    // A rank shut out of a quorum round: its ALL_GATHER rows are zeros.
    if (setup_.op != v1::ALL_GATHER) continue;
    for (size_t i = 0; i < fingerprint_.size(); ++i) {
      FG_ASSIGN_OR_RETURN(uint8_t * row, target_->Place(r, static_cast<int>(i),
                                                        fingerprint_[i]));
      std::memset(row, 0, static_cast<size_t>(input_bytes_[i]));
    }
  }
  if (setup_.op == v1::ALL_REDUCE) {
    Part& result = parts_[setup_.world_size];
    Digest committed;
    if (!DigestFromBytes(commit.result_digest(), &committed)) {
      return absl::DataLossError("the commit carries no result digest");
    }
    if (absl::Status complete = result.sequence->CheckComplete();
        !complete.ok()) {
      return absl::DataLossError(
          absl::StrCat("the result is incomplete: ", complete.message()));
    }
    const Digest received = result.hasher.Finish();
    if (received != committed) {
      return absl::DataLossError(
          absl::StrCat("the received result hashes to ", DigestToHex(received),
                       " but the commit says ", DigestToHex(committed)));
    }
  }
  committed_ = true;
  return absl::OkStatus();
}

void CollectiveCall::AwaitAttempt(absl::Time deadline, absl::Duration timeout) {
  for (;;) {
    const absl::Time until =
        setup_.liveness == nullptr
            ? deadline
            : std::min(deadline,
                       setup_.clock->Now() + setup_.liveness->check_every());
    if (setup_.clock->WaitForNotification(&attempt_->done, until)) return;
    const absl::Time now = setup_.clock->Now();
    absl::Status abort = setup_.liveness == nullptr
                             ? absl::OkStatus()
                             : setup_.liveness->Check(now);
    if (abort.ok() && now >= deadline) {
      abort = absl::DeadlineExceededError(
          absl::StrCat("group '", setup_.group, "' seq ", setup_.seq,
                       ": no result within the client timeout of ",
                       absl::FormatDuration(timeout)));
    }
    if (!abort.ok()) {
      Abort(attempt_.get(), abort);
      attempt_->done.WaitForNotification();
      return;
    }
  }
}

absl::Status CollectiveCall::Wait(absl::Duration timeout) {
  const absl::Time deadline = setup_.clock->Now() + timeout;
  absl::Time broken_since = absl::InfiniteFuture();
  absl::Duration backoff = absl::Milliseconds(20);
  for (;;) {
    AwaitAttempt(deadline, timeout);
    {
      absl::MutexLock lock(&mu_);
      if (!error_.ok()) return error_;
    }
    const grpc::Status& status = attempt_->status;
    if (status.ok()) {
      if (!committed_) {
        return absl::DataLossError(
            "the server ended the collective without a commit");
      }
      return absl::OkStatus();
    }
    // A stream the server ended on purpose carries the round's outcome; a
    // broken one is resumed, with backoff, within the grace.
    const absl::Time now = setup_.clock->Now();
    if (broken_since == absl::InfiniteFuture()) broken_since = now;
    if (attempt_->server_final || committed_ ||
        now + backoff >
            std::min(deadline, broken_since + setup_.resume_grace)) {
      return FromGrpcStatus(status);
    }
    setup_.clock->SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
    StartAttempt(/*resume=*/true);
  }
}

}  // namespace fedgather
