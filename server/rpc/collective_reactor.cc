#include "server/rpc/collective_reactor.h"

#include <exception>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/bounded_text.h"
#include "common/data_plane_name.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace fedgather::server {
namespace {

// What a Delivery's message may add to the status every rank gets.
constexpr size_t kMaxDeliveryMessageBytes = 1024;

// CheckDigestAlgorithm: a header must declare the hash its round (its
// epoch) names contributions by, before any byte is hashed.
absl::Status CheckDigestAlgorithm(const v1::CollectiveHeader& header,
                                  DigestAlgorithm expected,
                                  absl::string_view rank_name) {
  absl::StatusOr<DigestAlgorithm> declared = DigestAlgorithmFromProto(
      header.digest_algorithm(),
      absl::StrCat(rank_name, " header's digest_algorithm"));
  if (!declared.ok()) return declared.status();
  if (*declared == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      rank_name, " header declares digest_algorithm ",
      DigestAlgorithmName(*declared),
      header.digest_algorithm() == v1::DIGEST_ALGORITHM_UNSPECIFIED
          ? " (unset, which means sha256)"
          : "",
      " but the epoch names contributions by ", DigestAlgorithmName(expected),
      " (Joined.digest_algorithm)"));
}

// CheckDataPlane: a header must declare its epoch's plane
// (Joined.data_plane), so that no rank sends chunks the server must not
// get, or waits for chunks that go elsewhere.
absl::Status CheckDataPlane(const v1::CollectiveHeader& header,
                            bool direct_epoch, absl::string_view rank_name) {
  const v1::DataPlane expected =
      direct_epoch ? v1::DATA_PLANE_DIRECT : v1::DATA_PLANE_RELAY;
  const v1::DataPlane declared =
      header.data_plane() == v1::DATA_PLANE_UNSPECIFIED ? v1::DATA_PLANE_RELAY
                                                        : header.data_plane();
  if (declared == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(rank_name, " header declares data_plane ",
                   v1::DataPlane_IsValid(header.data_plane())
                       ? DataPlaneName(header.data_plane())
                       : absl::StrCat(header.data_plane(), " (unknown)"),
                   " but its epoch runs on the ", DataPlaneName(expected),
                   " plane (Joined.data_plane)"));
}

}  // namespace

CollectiveReactor* CollectiveReactor::Start(
    grpc::CallbackServerContext* context, GroupRegistry* registry,
    AccessControl* access, FirstFrameDeadlines* first_frame,
    absl::StatusOr<Admission> admission, int64_t max_chunk_bytes,
    Clock* clock) {
  const bool admitted = admission.ok();
  std::shared_ptr<CollectiveReactor> reactor(new CollectiveReactor(
      context, registry, access, admitted ? *std::move(admission) : Admission{},
      max_chunk_bytes, std::move(clock)));
  reactor->self_ = reactor;
  if (!admitted) {
    reactor->FinishWithoutRound(admission.status());
  } else {
    if (ServerCounters* metrics = registry->metrics(); metrics != nullptr) {
      metrics->StreamOpened(StreamKind::kCollective);
      reactor->counted_ = true;
    }
    first_frame->Watch(reactor, reactor->clock_->Now());
    reactor->StartRead(&reactor->read_buffer_);
  }
  return reactor.get();
}

CollectiveReactor::CollectiveReactor(grpc::CallbackServerContext* context,
                                     GroupRegistry* registry,
                                     AccessControl* access, Admission admission,
                                     int64_t max_chunk_bytes, Clock* clock)
    : context_(context),
      registry_(registry),
      access_(access),
      caller_(std::move(admission.caller)),
      stream_lease_(std::move(admission.stream)),
      max_chunk_bytes_(max_chunk_bytes),
      clock_(clock) {}

std::string CollectiveReactor::StreamName() const {
  return absl::StrCat("the collective stream of '", caller_.identity, "' from ",
                      caller_.peer);
}

std::shared_ptr<Round> CollectiveReactor::round() {
  absl::MutexLock lock(&mu_);
  return round_;
}

std::shared_ptr<RoundDataPlane> CollectiveReactor::plane() { return round(); }

absl::Status CollectiveReactor::UploadSink::Begin(const ChunkMeta& meta) {
  if (reactor_->direct_) {
    return absl::InvalidArgumentError(
        "the round runs on the direct plane: its chunks go between the ranks "
        "over peer links, never to the server");
  }
  if (meta.rank != static_cast<uint32_t>(reactor_->rank_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a chunk names rank ", meta.rank,
                     " but the stream is rank ", reactor_->rank_));
  }
  meta_ = meta;
  // Validated first: the size is then at most the chunk limit.
  FG_RETURN_IF_ERROR(
      reactor_->sequence_->Accept(meta.tensor_index, meta.offset, meta.size));
  if (reactor_->op_ == v1::ALL_REDUCE) bytes_.reserve(meta.size);
  return absl::OkStatus();
}

void CollectiveReactor::UploadSink::Data(const uint8_t* data, size_t size) {
  reactor_->hasher_->Update(data, size);
  if (reactor_->op_ == v1::ALL_REDUCE) {
    bytes_.append(reinterpret_cast<const char*>(data), size);
  }
}

void CollectiveReactor::LoseStream(absl::string_view why) {
  PendingCallbacks callbacks;  // runs after the locks are released
  std::shared_ptr<Round> r;    // the round when the stream was lost
  {
    absl::MutexLock read_lock(&read_mu_);
    {
      absl::MutexLock lock(&mu_);
      if (lost_) return;
      lost_ = true;
      r = round_;
    }
    if (r != nullptr) {
      RoundDataPlane& plane = *r;
      plane.StreamLost(rank_, why, clock_->Now(), &callbacks,
                       std::move(hasher_));
    }
  }
  // Finished with no lock held: once Finish is called, OnDone may free
  // this reactor.
  if (r == nullptr) {
    FinishWithoutRound(absl::CancelledError(
        absl::StrCat("the collective stream ", why, " before its header")));
    return;
  }
  // The round no longer drives this stream: finish it here, so OnDone runs.
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
  }
  Finish(grpc::Status(
      grpc::StatusCode::CANCELLED,
      absl::StrCat(r->Describe(), ": rank ", rank_, " (", caller_.identity,
                   ") ", why, " before the round completed")));
}

void CollectiveReactor::ExpireFirstFrameWait(absl::Duration limit) {
  PendingCallbacks callbacks;  // runs after read_mu_ is released
  absl::MutexLock read_lock(&read_mu_);
  if (phase_ != Phase::kHeader) return;
  {
    absl::MutexLock lock(&mu_);
    if (lost_ || finished_ || round_ != nullptr) return;
    lost_ = true;  // a header read after this is ignored
  }
  RejectUpload(absl::DeadlineExceededError(
                   absl::StrCat("the collective stream sent no header within ",
                                absl::FormatDuration(limit))),
               &callbacks);
}

void CollectiveReactor::OnReadDone(bool ok) {
  if (!ok) {
    {
      absl::MutexLock read_lock(&read_mu_);
      // The client half-closed after End.
      if (phase_ == Phase::kEnded) return;
    }
    LoseStream("closed its collective stream");  // takes read_mu_
    return;
  }
  PendingCallbacks callbacks;  // runs after read_mu_ is released
  absl::MutexLock read_lock(&read_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (lost_) return;
  }
  absl::StatusOr<bool> read_more;
  // No exception may escape into gRPC: an allocation that fails while a
  // frame is handled fails the round (or the stream) like any other error.
  try {
    v1::CollectiveFrame frame;
    UploadSink sink(this);
    absl::StatusOr<v1::CollectiveFrame::KindCase> kind = DecodeFrame(
        read_buffer_, &frame, phase_ == Phase::kChunks ? &sink : nullptr);
    if (!kind.ok() && phase_ == Phase::kHeader) {
      kind = absl::Status(kind.status().code(),
                          absl::StrCat(StreamName(),
                                       " must open with its "
                                       "header: ",
                                       kind.status().message()));
    }
    read_more = kind.ok() ? HandleFrame(*kind, frame, sink, &callbacks)
                          : absl::StatusOr<bool>(kind.status());
  } catch (const std::bad_alloc&) {
    read_more = absl::ResourceExhaustedError(
        "the server ran out of memory handling the stream's frame");
  } catch (const std::exception& e) {
    read_more = absl::InternalError(absl::StrCat(
        "the server failed handling the stream's frame: ", e.what()));
  }
  if (!read_more.ok()) {
    RejectUpload(read_more.status(), &callbacks);
  } else if (*read_more) {
    StartRead(&read_buffer_);
  }
}

absl::StatusOr<bool> CollectiveReactor::HandleFrame(
    v1::CollectiveFrame::KindCase kind, const v1::CollectiveFrame& frame,
    const UploadSink& chunk, PendingCallbacks* callbacks) {
  switch (phase_) {
    case Phase::kHeader:
      if (kind != v1::CollectiveFrame::kHeader) {
        return absl::InvalidArgumentError(absl::StrCat(
            StreamName(), " must open with its header, not a frame of kind ",
            kind, " (the CollectiveFrame field number)"));
      }
      return HandleHeader(frame.header(), callbacks);
    case Phase::kChunks:
      if (kind == v1::CollectiveFrame::kChunk) {
        group_->MemberAlive(epoch_, rank_, clock_->Now());
        if (op_ == v1::ALL_REDUCE) {
          return plane()->OfferReduceChunk(
              rank_, read_buffer_, chunk.meta(),
              reinterpret_cast<const uint8_t*>(chunk.bytes().data()),
              callbacks);
        }
        return plane()->OfferChunk(
            rank_, read_buffer_, static_cast<int64_t>(chunk.size()), callbacks);
      }
      if (kind == v1::CollectiveFrame::kEnd) {
        if (absl::Status complete =
                direct_ ? absl::OkStatus() : sequence_->CheckComplete();
            !complete.ok()) {
          return complete;
        }
        if (frame.end().rank() != static_cast<uint32_t>(rank_)) {
          return absl::InvalidArgumentError(
              absl::StrCat("the end names rank ", frame.end().rank(),
                           " but the stream is rank ", rank_));
        }
        Digest claimed;
        if (direct_) {
          // The bytes went between the ranks: the digest is the rank's
          // claim, which every receiver checks before its Delivery.
          if (!DigestFromBytes(frame.end().digest(), &claimed)) {
            return absl::InvalidArgumentError(
                "ContributionEnd.digest must hold 32 bytes");
          }
          // A contribution of no bytes (a broadcast's non-root) has one
          // digest, which the server can check.
          if (sequence_->total_bytes() == 0 &&
              claimed != HashContent(hasher_->algorithm(), nullptr, 0)) {
            return absl::DataLossError(absl::StrCat(
                "the contribution holds no bytes, but its declared digest is ",
                DigestToHex(claimed)));
          }
          phase_ = Phase::kEnded;
          plane()->EndContribution(rank_, claimed, callbacks);
          return true;  // its Delivery comes next
        }
        const DigestAlgorithm algorithm = hasher_->algorithm();
        const Digest actual = hasher_->Finish();
        if (!DigestFromBytes(frame.end().digest(), &claimed)) {
          return absl::InvalidArgumentError(
              "ContributionEnd.digest must hold 32 bytes");
        }
        if (claimed != actual) {
          return absl::DataLossError(absl::StrCat(
              "the contribution's declared ", DigestAlgorithmName(algorithm),
              " digest ", DigestToHex(claimed),
              " does not match its bytes, which hash to ",
              DigestToHex(actual)));
        }
        phase_ = Phase::kEnded;
        plane()->EndContribution(rank_, actual, callbacks);
        return true;  // to see the client's half-close
      }
      return absl::InvalidArgumentError(
          "only chunks and the end may follow the header");
    case Phase::kEnded:
      if (direct_ && kind == v1::CollectiveFrame::kDelivery && !delivered_) {
        delivered_ = true;
        return HandleDelivery(frame.delivery(), callbacks);
      }
      return absl::InvalidArgumentError(
          direct_ ? "only one Delivery may follow the end of a direct round"
                  : "a frame arrived after the end");
  }
  return absl::InternalError("unreachable phase");
}

absl::StatusOr<bool> CollectiveReactor::HandleDelivery(
    const v1::Delivery& delivery, PendingCallbacks* callbacks) {
  if (delivery.rank() != static_cast<uint32_t>(rank_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the Delivery names rank ", delivery.rank(),
                     " but the stream is rank ", rank_));
  }
  group_->AddPeerLinkBytes(epoch_, rank_, delivery.link_bytes_sent(),
                           delivery.link_bytes_received());
  if (delivery.code() == 0) {
    FG_RETURN_IF_ERROR(
        round()->ConfirmDelivery(rank_, delivery.result_digest(), callbacks));
    return true;  // to see the client's half-close
  }
  if (delivery.code() < 1 || delivery.code() > 16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Delivery.code ", delivery.code(), " is not a google.rpc.Code"));
  }
  // What failed on this rank's peer links fails the round on every rank,
  // with the rank's own words (bounded).
  std::shared_ptr<Round> r = round();
  r->Fail(absl::Status(static_cast<absl::StatusCode>(delivery.code()),
                       absl::StrCat(r->Describe(), ": rank ", rank_, " (",
                                    caller_.identity, ") reports: ",
                                    TruncateText(delivery.message(),
                                                 kMaxDeliveryMessageBytes))),
          callbacks);
  return true;
}

absl::StatusOr<bool> CollectiveReactor::HandleHeader(
    const v1::CollectiveHeader& header, PendingCallbacks* callbacks) {
  if (absl::Status allowed =
          access_->Authorize(caller_, header.group(), Action::kContribute);
      !allowed.ok()) {
    refusal_reported_ = true;
    return allowed;
  }
  absl::StatusOr<GroupState*> group =
      registry_->Find(header.group(), caller_.identity);
  if (!group.ok()) return group.status();
  absl::StatusOr<std::shared_ptr<Round>> found =
      (*group)->FindRound(caller_.identity, header, clock_->Now(), callbacks);
  if (!found.ok()) return found.status();
  // The header is this rank's (FindRound checked the identity, epoch and
  // seq): one it cannot stand behind fails the round on every rank, so the
  // others hear of it at once and the seq is spent as for any header. The
  // rank is told the round's status: an earlier failure's, when the round
  // had already failed (a rank that attaches late gets the same status as
  // the others, whatever its own header holds).
  auto fail_round = [&](const absl::Status& why) {
    (*found)->Fail(why, callbacks);
    const absl::Status failure = (*found)->Failure();
    return failure.ok() ? why : failure;
  };
  const std::string rank_name =
      absl::StrCat((*found)->Describe(), ": rank ", header.rank(), " (",
                   caller_.identity, ")");
  absl::StatusOr<Fingerprint> fingerprint = FingerprintFromProto(
      header.tensors(), absl::StrCat(rank_name, " header"));
  absl::Status valid = fingerprint.status();
  if (valid.ok() && header.op() != v1::ALL_GATHER &&
      header.op() != v1::ALL_GATHER_V && header.op() != v1::ALL_GATHER_BYTES &&
      header.op() != v1::BROADCAST && header.op() != v1::ALL_REDUCE) {
    valid = absl::UnimplementedError(
        absl::StrCat(rank_name, ": op ", OpName(header.op()),
                     " is not supported by this server"));
  }
  if (valid.ok()) {
    valid = CheckFingerprintForOp(header.op(), *fingerprint, rank_name);
  }
  if (valid.ok()) {
    valid =
        CheckDigestAlgorithm(header, (*found)->digest_algorithm(), rank_name);
  }
  if (valid.ok()) {
    valid = CheckDataPlane(header, (*found)->direct_epoch(), rank_name);
  }
  if (!valid.ok()) return fail_round(valid);
  const bool direct = (*found)->direct_epoch();
  if (direct && header.resume()) {
    // Its parts travelled over peer links the broken stream does not
    // describe; the round fails on every rank when the grace passes.
    return absl::FailedPreconditionError(absl::StrCat(
        rank_name, ": a round on the direct plane is not resumed"));
  }
  // What this rank uploads: a BROADCAST's non-root ranks send no bytes.
  Fingerprint sent = *fingerprint;
  if (header.op() == v1::BROADCAST && header.root() != header.rank()) {
    sent.clear();
  }
  // A contribution past the caller's limits fails the round on every rank.
  ServerEvent about;
  about.group = header.group();
  about.epoch = header.epoch();
  about.seq = header.seq();
  about.rank = static_cast<int>(header.rank());
  about.op = header.op();
  const int64_t upload_bytes =
      UploadBytes(static_cast<int>(header.rank()), header, *fingerprint);
  if (absl::Status within = access_->CheckContribution(
          caller_, static_cast<int>(sent.size()), upload_bytes,
          (*found)->Describe(), std::move(about));
      !within.ok()) {
    refusal_reported_ = true;
    return fail_round(within);
  }
  absl::StatusOr<IdentityUsage::Lease> round_lease =
      access_->AcquireRound(caller_, header.group());
  if (!round_lease.ok()) {
    refusal_reported_ = true;
    return fail_round(round_lease.status());
  }
  round_lease_ = *std::move(round_lease);
  fingerprint_ = *std::move(fingerprint);
  upload_ = std::move(sent);
  sequence_.emplace(upload_, max_chunk_bytes_);  // keeps a reference
  hasher_.emplace((*found)->digest_algorithm());
  rank_ = static_cast<int>(header.rank());
  op_ = header.op();
  direct_ = direct;
  group_ = *group;
  epoch_ = header.epoch();
  {
    absl::MutexLock lock(&mu_);
    round_ = *found;
  }
  AttachRequest request;
  request.rank = rank_;
  request.peer = caller_.peer;
  request.header = header;
  request.fingerprint = fingerprint_;
  request.header_frame = read_buffer_;
  request.stream = weak_from_this();
  request.upload_bytes = upload_bytes;
  absl::Status attached;
  if (header.resume()) {
    absl::StatusOr<Round::ResumePoint> point =
        (*found)->Resume(std::move(request), callbacks);
    if (point.ok()) {
      // The round holds this stream now: a resume point it cannot take
      // fails the round on every rank rather than leaving it waiting.
      if (absl::Status skipped = sequence_->SkipTo(point->upload_bytes);
          !skipped.ok()) {
        const absl::Status failed = absl::InternalError(absl::StrCat(
            (*found)->Describe(), ": rank ", rank_, " (", caller_.identity,
            "): the server's resume point is not in the upload: ",
            skipped.message()));
        (*found)->Fail(failed, callbacks);
        return failed;
      }
      if (point->hasher.has_value()) hasher_ = std::move(point->hasher);
      v1::CollectiveFrame reply;
      reply.mutable_resumed()->set_upload_bytes(
          static_cast<uint64_t>(point->upload_bytes));
      reply.mutable_resumed()->set_upload_ended(point->upload_ended);
      absl::MutexLock lock(&mu_);
      resumed_reply_ = EncodeFrame(reply);
      if (point->upload_ended) phase_ = Phase::kEnded;
    } else {
      attached = point.status();
    }
  } else {
    attached = (*found)->Attach(std::move(request), callbacks);
  }
  if (!attached.ok()) {
    {
      absl::MutexLock lock(&mu_);
      round_ = nullptr;
    }
    return attached;
  }
  if (phase_ == Phase::kHeader) phase_ = Phase::kChunks;
  return true;
}

void CollectiveReactor::RejectUpload(const absl::Status& rejected,
                                     PendingCallbacks* callbacks) {
  const absl::Status status = BoundStatus(rejected);
  std::shared_ptr<Round> r = round();
  if (r == nullptr) {
    if (!refusal_reported_) {
      ServerEvent refused;
      refused.kind = EventKind::kCollectiveRefused;
      refused.identity = caller_.identity;
      refused.peer = caller_.peer;
      refused.status = status;
      DeferEvent(registry_->events(), std::move(refused), callbacks);
    }
    FinishWithoutRound(status);
    return;
  }
  r->Fail(absl::Status(status.code(),
                       absl::StrCat(r->Describe(), ": rank ", rank_, " (",
                                    caller_.identity, "): ", status.message())),
          callbacks);
}

void CollectiveReactor::FinishWithoutRound(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
  }
  FinishWith(status);
}

void CollectiveReactor::FinishWith(const absl::Status& status) {
  context_->AddTrailingMetadata(
      kFinalStatusKey,
      status.GetPayload(kRetryPayload).has_value() ? kFinalStatusRetry : "1");
  Finish(ToGrpcStatus(status));
}

void CollectiveReactor::WakeWriter() {
  Outgoing out;
  PendingCallbacks callbacks;  // runs after mu_ is released
  {
    absl::MutexLock lock(&mu_);
    if (write_in_flight_ || finished_ || lost_ || round_ == nullptr) return;
    if (resumed_reply_.has_value()) {
      reply_in_flight_ = true;
      out.kind = Outgoing::Kind::kFrame;
      out.frame = *std::move(resumed_reply_);
      resumed_reply_.reset();
    } else {
      RoundDataPlane& plane = *round_;
      out = plane.NextOutgoing(rank_, &callbacks);
    }
    switch (out.kind) {
      case Outgoing::Kind::kNothing:
        return;
      case Outgoing::Kind::kFrame:
        write_in_flight_ = true;
        write_buffer_ = std::move(out.frame);
        break;
      case Outgoing::Kind::kCommitAndFinish:
        finished_ = true;
        write_buffer_ = std::move(out.frame);
        break;
      case Outgoing::Kind::kFinish:
        finished_ = true;
        break;
    }
  }
  // write_buffer_ is stable: nothing else writes it until this write is done.
  switch (out.kind) {
    case Outgoing::Kind::kFrame:
      StartWrite(&write_buffer_);
      break;
    case Outgoing::Kind::kCommitAndFinish:
      context_->AddTrailingMetadata(kFinalStatusKey, "1");
      StartWriteAndFinish(&write_buffer_, grpc::WriteOptions(),
                          grpc::Status::OK);
      break;
    case Outgoing::Kind::kFinish:
      FinishWith(out.status);
      break;
    case Outgoing::Kind::kNothing:
      break;
  }
}

void CollectiveReactor::OnWriteDone(bool ok) {
  PendingCallbacks callbacks;  // runs after mu_ is released
  {
    // The write stays "in flight" until the round has advanced this stream's
    // cursor, so a concurrent WakeWriter cannot pull the same frame again;
    // under mu_, so that a stream already lost leaves the round alone.
    absl::MutexLock lock(&mu_);
    if (reply_in_flight_) {
      reply_in_flight_ = false;
    } else if (!lost_ && round_ != nullptr) {
      RoundDataPlane& plane = *round_;
      plane.WriteDone(rank_, ok, &callbacks);
    }
    write_in_flight_ = false;
  }
  if (!ok) {
    // The stream is broken: writing again would only fail again (the round
    // keeps the frame for a resumed stream). Lose it now rather than when
    // OnCancel comes.
    LoseStream("stopped receiving");
    return;
  }
  WakeWriter();
}

void CollectiveReactor::ResumeReading() {
  // Under mu_: Finish is called only after finished_ is set under it, so
  // this read starts before the stream finishes or not at all (a read
  // started after Finish could touch a freed call). gRPC never runs
  // OnReadDone inline from StartRead, so holding mu_ here cannot deadlock.
  absl::MutexLock lock(&mu_);
  if (finished_ || lost_) return;
  StartRead(&read_buffer_);
}

void CollectiveReactor::OnCancel() { LoseStream("was cancelled"); }

void CollectiveReactor::OnDone() {
  if (counted_) registry_->metrics()->StreamClosed(StreamKind::kCollective);
  {
    absl::MutexLock lock(&mu_);
    round_ = nullptr;
  }
  std::shared_ptr<CollectiveReactor> last = std::move(self_);
}

}  // namespace fedgather::server
