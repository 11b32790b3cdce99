#include "client/direct_data_plane.h"

#include <algorithm>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/peer/bruck_all_gather.h"
#include "client/peer/gather_all_reduce.h"
#include "client/peer/op_algorithm.h"
#include "client/peer/ring_all_gather.h"
#include "client/peer/ring_all_reduce.h"
#include "client/relay_data_plane.h"
#include "common/bounded_text.h"
#include "common/content_hasher.h"
#include "common/dtype.h"
#include "common/fingerprint.h"
#include "common/frame_codec.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace fedgather {
namespace {

// What a Delivery's message may hold (the server keeps 1024 bytes).
constexpr size_t kDeliveryMessageBytes = 1024;

// One direct collective: the handler's side is a FrameStream, the
// server's side a FrameHandler of the held Collective stream under it.
//
// The hold (HeldFrameStream) covers the one write made outside the
// server stream's calls, the Delivery, which the ring thread may make. It
// is released exactly once, by whichever path makes the last decision,
// under mu_: after the Delivery's write; or, when no Delivery will be
// written (the server's side is over, or the call was cancelled), by the
// ring thread's end or by that stop itself when no ring runs.
class DirectStream : public FrameStream, public FrameHandler {
 public:
  DirectStream(RelayDataPlane* server, PeerRing* ring,
               const DirectPlaneOptions& options, DirectScratch* scratch,
               grpc::ByteBuffer header, FrameHandler* handler)
      : handler_(handler),
        ring_(ring),
        options_(options),
        rank_(ring->rank),
        world_(static_cast<int>(ring->identities.size())),
        mine_(scratch->mine),
        out_(scratch->parts),
        gathered_(scratch->gathered),
        accumulators_(scratch->accumulators),
        fingerprints_(world_),
        weights_(world_, 1.0),
        header_seen_(world_, false) {
    grpc::ByteBuffer copy = header;
    v1::CollectiveFrame frame;
    absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
        DecodeFrame(copy, &frame, nullptr);
    if (kind.ok() && *kind == v1::CollectiveFrame::kHeader) {
      seq_ = frame.header().seq();
      op_ = frame.header().op();
      root_ = static_cast<int>(frame.header().root());
      reduce_ = frame.header().reduce();
      weights_[rank_] = frame.header().weight();
      absl::StatusOr<DigestAlgorithm> digest = DigestAlgorithmFromProto(
          frame.header().digest_algorithm(), "the header");
      absl::StatusOr<Fingerprint> own =
          FingerprintFromProto(frame.header().tensors(), "this rank's header");
      if (digest.ok() && own.ok()) {
        digest_ = *digest;
        fingerprints_[rank_] = *std::move(own);
        int64_t own_bytes = 0;
        for (const TensorSpec& spec : fingerprints_[rank_]) {
          own_bytes += ByteSize(spec).value_or(0);
        }
        mine_.clear();
        mine_.reserve(static_cast<size_t>(own_bytes));
      }
    }
    server_ = server->OpenHeld(std::move(header), this);
  }

  ~DirectStream() override {
    // The ring thread's last step is the hold's release or the Delivery's
    // write; it may still be unwinding when the owner destroys this.
    if (ring_thread_.joinable()) ring_thread_.join();
  }

  // FrameStream, for the handler.
  void Start() override { server_->Start(); }

  void Write(grpc::ByteBuffer frame) override {
    v1::CollectiveFrame message;
    OwnPartSink sink(this);
    absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
        DecodeFrame(frame, &message, &sink);
    if (kind.ok() && *kind == v1::CollectiveFrame::kChunk) {
      // This rank's part stays here for the ring. The handler writes its
      // next frame from OnWritten: loop rather than recurse.
      ++absorbed_;
      if (absorbing_) return;
      absorbing_ = true;
      while (absorbed_ > 0) {
        --absorbed_;
        handler_->OnWritten(true);
      }
      absorbing_ = false;
      return;
    }
    const bool end = kind.ok() && *kind == v1::CollectiveFrame::kEnd;
    WriteToServer(std::move(frame), /*delivery=*/false);
    if (end) {
      absl::MutexLock lock(&mu_);
      end_written_ = true;
      MaybeStartRingLocked();
    }
  }

  // The half-close goes after the Delivery (OnWritten).
  void WritesDone() override {}

  void Cancel() override {
    server_->Cancel();
    Stop();
  }

  // FrameHandler, for the server's stream.
  void OnWritten(bool ok) override {
    bool delivery;
    std::optional<grpc::ByteBuffer> next;
    {
      absl::MutexLock lock(&mu_);
      delivery = writing_delivery_;
      writing_delivery_ = false;
      if (queued_delivery_.has_value()) {
        next = std::move(queued_delivery_);
        queued_delivery_.reset();
        writing_delivery_ = true;
      } else {
        server_busy_ = false;
      }
    }
    if (next.has_value()) server_->Write(*std::move(next));
    if (delivery) {
      if (ok) server_->WritesDone();
      server_->Release();
      return;
    }
    handler_->OnWritten(ok);
  }

  bool OnFrame(grpc::ByteBuffer& frame) override {
    grpc::ByteBuffer copy = frame;
    v1::CollectiveFrame message;
    absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
        DecodeFrame(copy, &message, nullptr);
    bool claimed;
    {
      absl::MutexLock lock(&mu_);
      claimed = claims_.has_value();
    }
    if (kind.ok() && *kind == v1::CollectiveFrame::kClaims) {
      if (claimed) return Protocol("the server sent the claims twice");
      std::optional<v1::Commit> verdict_claims;
      {
        absl::MutexLock lock(&mu_);
        claims_ = message.claims();
        verdict_claims = VerdictDueLocked();
      }
      if (verdict_claims.has_value()) RunVerdict(*verdict_claims);
      return true;
    }
    // After the claims only the commit may come, once every Delivery is
    // in: nothing may reach the handler while the parts do.
    if (claimed && !(kind.ok() && *kind == v1::CollectiveFrame::kCommit)) {
      return Protocol(
          "the server sent a frame other than the commit after the claims");
    }
    if (!(kind.ok() && *kind == v1::CollectiveFrame::kHeader)) {
      return handler_->OnFrame(frame);
    }
    // Every other rank's header comes (the server forwards them all in a
    // direct round); the handler takes those the relay would have sent.
    const v1::CollectiveHeader& header = message.header();
    const int r = static_cast<int>(header.rank());
    if (header.rank() >= static_cast<uint32_t>(world_) || r == rank_ ||
        header_seen_[r]) {
      return Protocol(
          absl::StrCat("an unexpected header for rank ", header.rank()));
    }
    header_seen_[r] = true;
    if (HandlerTakesHeader(r) && !handler_->OnFrame(frame)) return false;
    absl::StatusOr<Fingerprint> fingerprint =
        FingerprintFromProto(header.tensors(), "a header");
    if (!fingerprint.ok()) return Protocol(fingerprint.status().message());
    absl::MutexLock lock(&mu_);
    fingerprints_[r] = *std::move(fingerprint);
    weights_[r] = header.weight();
    ++headers_;
    MaybeStartRingLocked();
    return true;
  }

  void OnReadEnded() override { Stop(); }

  void OnEnded(const grpc::Status& status, bool) override {
    // Never resumed: what ended it is the round's outcome here, unless
    // the server broke the protocol.
    absl::Status local;
    {
      absl::MutexLock lock(&mu_);
      local = local_error_;
    }
    handler_->OnEnded(local.ok() ? status : ToGrpcStatus(local),
                      /*server_final=*/true);
  }

 private:
  // Keeps this rank's chunks, in the order the handler writes them.
  class OwnPartSink : public ChunkSink {
   public:
    explicit OwnPartSink(DirectStream* stream) : stream_(stream) {}
    absl::Status Begin(const ChunkMeta&) override { return absl::OkStatus(); }
    void Data(const uint8_t* data, size_t size) override {
      stream_->mine_.append(reinterpret_cast<const char*>(data), size);
    }

   private:
    DirectStream* stream_;
  };

  // HandlerTakesHeader: whether the relay would have sent rank r's header
  // to this rank (docs/protocol.md, "Ops").
  bool HandlerTakesHeader(int r) const {
    switch (op_) {
      case v1::BROADCAST:
        return r == root_;
      case v1::ALL_REDUCE:
        return false;
      default:
        return true;
    }
  }

  // Carries: whether rank r's part goes round the ring (a broadcast's
  // non-roots have none; an all_reduce's parts are reduced instead).
  bool Carries(int r) const {
    return op_ == v1::BROADCAST ? r == root_ : op_ != v1::ALL_REDUCE;
  }

  // Protocol: the server sent what a direct round never holds; the call
  // fails (the handler hears it as a broken stream) and the ring stops.
  bool Protocol(absl::string_view what) {
    {
      absl::MutexLock lock(&mu_);
      if (local_error_.ok()) {
        local_error_ = absl::InternalError(
            absl::StrCat("protocol error on the direct plane: ", what));
      }
    }
    server_->Cancel();
    Stop();
    return false;
  }

  void WriteToServer(grpc::ByteBuffer frame, bool delivery) {
    {
      absl::MutexLock lock(&mu_);
      if (server_busy_) {
        queued_delivery_ = std::move(frame);  // only a Delivery waits
        return;
      }
      server_busy_ = true;
      writing_delivery_ = delivery;
    }
    server_->Write(std::move(frame));
  }

  // MaybeStartRingLocked starts the ring once this rank's part is whole and
  // every rank's size is known.
  void MaybeStartRingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ring_started_ || stopped_ || !end_written_ || headers_ < world_ - 1) {
      return;
    }
    ring_started_ = true;
    sizes_.assign(world_, 0);
    offsets_.assign(world_, 0);
    size_t total = 0;
    for (int r = 0; r < world_; ++r) {
      for (const TensorSpec& spec : fingerprints_[r]) {
        sizes_[r] += static_cast<size_t>(ByteSize(spec).value_or(0));
      }
      if (op_ == v1::ALL_REDUCE) continue;  // out_ holds the result
      if (!Carries(r)) sizes_[r] = 0;
      offsets_[r] = total;
      total += sizes_[r];
    }
    out_.resize(op_ == v1::ALL_REDUCE ? sizes_[rank_] : total);
    algorithm_ = ChooseOpAlgorithm(op_, sizes_);
    if (op_ == v1::ALL_REDUCE && algorithm_ == OpAlgorithm::kLogSteps) {
      gathered_.resize(sizes_[rank_] * static_cast<size_t>(world_));
    }
    ring_thread_ = std::thread([this] { RunRing(); });
  }

  void RunRing() {
    RingOptions ring_options;
    ring_options.op = seq_;
    ring_options.chunk_bytes = options_.ring_chunk_bytes;
    ring_options.stall_timeout = options_.stall_timeout;
    ring_options.forward_hook = options_.forward_hook;
    const std::vector<PeerLink*> to = ring_->to_links();
    const std::vector<PeerLink*> from = ring_->from_links();
    const int64_t sent_before = ring_->bytes_sent();
    const int64_t received_before = ring_->bytes_received();
    const bool log_steps = algorithm_ == OpAlgorithm::kLogSteps;
    absl::Status status;
    if (mine_.size() != sizes_[rank_]) {
      status = absl::InternalError("this rank's part is incomplete");
    } else if (op_ == v1::ALL_REDUCE && log_steps) {
      status = GatherAllReduce(rank_, fingerprints_[rank_], reduce_, weights_,
                               mine_.data(), gathered_.data(), out_.data(), to,
                               from, ring_options, &accumulators_);
    } else if (op_ == v1::ALL_REDUCE) {
      status = RingAllReduce(rank_, fingerprints_[rank_], reduce_, weights_,
                             mine_.data(), out_.data(), ring_->to_next(),
                             ring_->from_prev(), ring_options, &accumulators_);
    } else if (log_steps) {
      status = BruckAllGather(rank_, sizes_, mine_.data(), out_.data(), to,
                              from, ring_options);
    } else {
      status =
          RingAllGather(rank_, sizes_, mine_.data(), out_.data(),
                        ring_->to_next(), ring_->from_prev(), ring_options);
    }
    link_bytes_sent_ = ring_->bytes_sent() - sent_before;
    link_bytes_received_ = ring_->bytes_received() - received_before;
    bool release = false;
    std::optional<v1::Commit> verdict_claims;
    {
      absl::MutexLock lock(&mu_);
      ring_done_ = true;
      ring_status_ = std::move(status);
      // No Delivery will go when the call stopped meanwhile: this is the
      // last decision, so the hold goes here.
      release = stopped_ && !verdict_started_;
      if (!release) verdict_claims = VerdictDueLocked();
    }
    if (release) server_->Release();
    if (verdict_claims.has_value()) RunVerdict(*verdict_claims);
  }

  // Stop: the server's side is over or the call was cancelled; no
  // Delivery starts from now on, and a running ring is cut short.
  void Stop() {
    bool release = false;
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return;
      stopped_ = true;
      if (ring_started_ && !ring_done_) {
        // RunRing releases the hold once the aborted links return.
        ring_->Abort();
      } else {
        release = !verdict_started_;
      }
    }
    if (release) server_->Release();
  }

  // VerdictDueLocked: once the ring is done and the claims are in (and
  // the call goes on), the verdict starts, on the calling thread: it
  // returns the claims to check against, once.
  std::optional<v1::Commit> VerdictDueLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (verdict_started_ || stopped_ || !ring_done_ || !claims_.has_value()) {
      return std::nullopt;
    }
    verdict_started_ = true;
    return claims_;
  }

  // RunVerdict checks the parts against `claims`, hands them to the
  // handler and sends the Delivery (whose write releases the hold).
  void RunVerdict(const v1::Commit& claims) {
    absl::Status verdict;
    {
      absl::MutexLock lock(&mu_);
      verdict = ring_status_;
    }
    if (verdict.ok()) verdict = CheckParts(claims);
    if (verdict.ok()) verdict = HandOver();
    v1::CollectiveFrame frame;
    v1::Delivery* delivery = frame.mutable_delivery();
    delivery->set_rank(static_cast<uint32_t>(rank_));
    delivery->set_code(static_cast<int32_t>(verdict.code()));
    delivery->set_message(
        TruncateText(verdict.message(), kDeliveryMessageBytes));
    delivery->set_link_bytes_sent(static_cast<uint64_t>(link_bytes_sent_));
    delivery->set_link_bytes_received(
        static_cast<uint64_t>(link_bytes_received_));
    if (verdict.ok() && op_ == v1::ALL_REDUCE) {
      delivery->set_result_digest(
          DigestBytes(HashContent(digest_, out_.data(), out_.size())));
    }
    WriteToServer(EncodeFrame(frame), /*delivery=*/true);
  }

  // CheckParts hashes every part the op brought (an all_reduce's
  // contributions, when they were gathered whole) and compares it with its
  // rank's claim.
  absl::Status CheckParts(const v1::Commit& claims) const {
    const bool gathered_reduce =
        op_ == v1::ALL_REDUCE && algorithm_ == OpAlgorithm::kLogSteps;
    for (const v1::RankDigest& claim : claims.contributions()) {
      const int r = static_cast<int>(claim.rank());
      if (r == rank_ || r >= world_ || !(Carries(r) || gathered_reduce)) {
        continue;
      }
      Digest claimed;
      if (!DigestFromBytes(claim.digest(), &claimed)) {
        return absl::DataLossError(
            absl::StrCat("the claims' entry for rank ", r, " is malformed"));
      }
      const Digest received =
          gathered_reduce
              ? HashContent(digest_, gathered_.data() + sizes_[r] * r,
                            sizes_[r])
              : HashContent(digest_, out_.data() + offsets_[r], sizes_[r]);
      if (received != claimed) {
        return absl::DataLossError(absl::StrCat(
            "rank ", r, " ('", claim.identity(), "'): its part arrived on ",
            ArrivalLink(r)->name(), " hashing to ", DigestToHex(received),
            ", but rank ", r, " claimed ", DigestToHex(claimed)));
      }
    }
    return absl::OkStatus();
  }

  // ArrivalLink: the link rank r's part arrived on.
  const PeerLink* ArrivalLink(int r) const {
    if (algorithm_ == OpAlgorithm::kRing) return ring_->from_prev();
    const int distance = (rank_ - r + world_) % world_;
    return ring_->from[BruckArrivalStep(distance)].get();
  }

  // HandOver gives the handler every other rank's part, or an
  // all_reduce's result, as the relay's chunk frames would.
  absl::Status HandOver() {
    if (op_ == v1::ALL_REDUCE) {
      return HandOverPart(world_, fingerprints_[rank_], out_.data());
    }
    for (int r = 0; r < world_; ++r) {
      if (r == rank_ || !Carries(r)) continue;
      FG_RETURN_IF_ERROR(
          HandOverPart(r, fingerprints_[r], out_.data() + offsets_[r]));
    }
    return absl::OkStatus();
  }

  // HandOverPart hands over the tensors of `fingerprint` at `part` as
  // rank `r`'s chunks (the result's for r = world), each ending on an
  // element boundary.
  absl::Status HandOverPart(int r, const Fingerprint& fingerprint,
                            const char* part) {
    for (size_t i = 0; i < fingerprint.size(); ++i) {
      const int64_t bytes = ByteSize(fingerprint[i]).value_or(0);
      const int64_t element =
          static_cast<int64_t>(DTypeSize(fingerprint[i].dtype));
      const int64_t most =
          std::max(element, options_.max_chunk_bytes / element * element);
      for (int64_t offset = 0; offset < bytes;) {
        ChunkMeta meta;
        meta.rank = static_cast<uint32_t>(r);
        meta.tensor_index = static_cast<uint32_t>(i);
        meta.offset = static_cast<uint64_t>(offset);
        meta.size = static_cast<uint64_t>(std::min(bytes - offset, most));
        grpc::ByteBuffer chunk = EncodeChunkFrame(meta, part);
        if (!handler_->OnFrame(chunk)) {
          return absl::CancelledError(
              absl::StrCat("rank ", rank_, " gave up the collective"));
        }
        part += meta.size;
        offset += static_cast<int64_t>(meta.size);
      }
    }
    return absl::OkStatus();
  }

  FrameHandler* const handler_;
  PeerRing* const ring_;
  const DirectPlaneOptions options_;
  const int rank_;
  const int world_;
  // This rank's header: the op and what the op's kind needs.
  uint64_t seq_ = 0;
  v1::Op op_ = v1::ALL_GATHER;
  int root_ = 0;                                  // BROADCAST
  v1::ReduceOp reduce_ = v1::REDUCE_UNSPECIFIED;  // ALL_REDUCE
  DigestAlgorithm digest_ = DigestAlgorithm::kBlake3;
  std::unique_ptr<HeldFrameStream> server_;

  // The handler's write chain (one write at a time).
  std::string& mine_;  // the plane's scratch, this rank's part
  int absorbed_ = 0;
  bool absorbing_ = false;

  // Fixed when the ring starts; the ring thread and the verdict read them.
  std::vector<size_t> sizes_;
  std::vector<size_t> offsets_;
  OpAlgorithm algorithm_ = OpAlgorithm::kRing;
  std::vector<char>& out_;           // the plane's scratch, every part
  std::vector<char>& gathered_;      // the plane's scratch
  std::vector<char>& accumulators_;  // the plane's scratch
  std::thread ring_thread_;
  // What the ring moved on this rank's two links (the ring thread writes
  // them before ring_done_, the verdict reads them after).
  int64_t link_bytes_sent_ = 0;
  int64_t link_bytes_received_ = 0;

  // Every rank's fingerprint and WEIGHTED_MEAN weight: written under mu_
  // before the ring starts, only read after.
  std::vector<Fingerprint> fingerprints_;
  std::vector<double> weights_;
  // Whose header arrived (the server's stream thread only).
  std::vector<bool> header_seen_;

  absl::Mutex mu_;
  absl::Status local_error_
      ABSL_GUARDED_BY(mu_);               // the server broke the protocol
  int headers_ ABSL_GUARDED_BY(mu_) = 0;  // of the other ranks
  bool end_written_ ABSL_GUARDED_BY(mu_) = false;
  bool ring_started_ ABSL_GUARDED_BY(mu_) = false;
  bool ring_done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status ring_status_ ABSL_GUARDED_BY(mu_);
  std::optional<v1::Commit> claims_ ABSL_GUARDED_BY(mu_);
  bool verdict_started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // The server stream's writes: one in flight (the header first).
  bool server_busy_ ABSL_GUARDED_BY(mu_) = true;
  bool writing_delivery_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::ByteBuffer> queued_delivery_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

DirectDataPlane::DirectDataPlane(RelayDataPlane* server, PeerRing* ring,
                                 DirectPlaneOptions options)
    : server_(server), ring_(ring), options_(std::move(options)) {}

std::unique_ptr<FrameStream> DirectDataPlane::Open(grpc::ByteBuffer header,
                                                   FrameHandler* handler) {
  return std::make_unique<DirectStream>(server_, ring_, options_, &scratch_,
                                        std::move(header), handler);
}

}  // namespace fedgather
