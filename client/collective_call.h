// CollectiveCall runs one collective on the client: it streams this rank's
// header, chunks and end to the server while, concurrently, it receives the
// other ranks' headers and chunks straight into the memory a ReceiveTarget
// names, hashing them as they land, and finally checks the commit's digests.
// Nothing counts as delivered before a commit whose digests all match.
//
// A stream that breaks (not one the server finished) is resumed on a new
// stream, with backoff, within CollectiveSetup::resume_grace: the upload goes
// on from the bytes the server holds, the download from the frames this
// client has; nothing is received twice.
//
// How the frames travel is the DataPlane's business (client/data_plane.h):
// each attempt opens one FrameStream on it (today the server's relay).
//
// Threading: Start may be called from any thread; the data plane runs the
// stream's events on its threads (gRPC's callback threads); Wait blocks the
// caller and starts the resumed streams. One stream (Attempt) runs at a
// time. Inputs and target memory must stay valid until Wait returns.
#ifndef FEDGATHER_CLIENT_COLLECTIVE_CALL_H_
#define FEDGATHER_CLIENT_COLLECTIVE_CALL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/data_plane.h"
#include "client/server_liveness.h"
#include "common/chunk_sequence.h"
#include "common/clock.h"
#include "common/content_hasher.h"
#include "common/fingerprint.h"
#include "common/frame_codec.h"
#include "common/tensor_spec.h"
#include "fedgather/v1/fedgather.pb.h"

namespace fedgather {

// ReceiveTarget says where each rank's tensors go. Place is called once per
// (rank, tensor), this rank included, from a gRPC thread, when the rank's
// header has arrived and before any of that tensor's bytes; it returns memory
// of ByteSize(spec) bytes, or an error that fails the call. For ALL_REDUCE
// it is called only for the result, with rank == world size, from Start.
class ReceiveTarget {
 public:
  virtual ~ReceiveTarget() = default;
  virtual absl::StatusOr<uint8_t*> Place(int rank, int tensor_index,
                                         const TensorSpec& spec) = 0;
};

// What a collective has moved so far, updated as it runs and readable
// from any thread (a progress display polls it). Counts every stream.
struct TransferProgress {
  std::atomic<int64_t> payload_bytes_sent{0};
  std::atomic<int64_t> payload_bytes_received{0};
  std::atomic<int> headers_received{0};  // other ranks that have started
};

// What the caller of one collective knows about its round.
struct CollectiveSetup {
  std::string group;
  uint64_t epoch = 0;
  uint64_t seq = 0;
  v1::Op op = v1::ALL_GATHER;
  int rank = 0;
  int world_size = 1;
  int64_t max_chunk_bytes = 1 << 20;
  // The hash the epoch names contributions by (Joined.digest_algorithm).
  DigestAlgorithm digest = DigestAlgorithm::kBlake3;
  // The size this rank's upload chunks are cut to (0: max_chunk_bytes).
  int64_t upload_chunk_bytes = 0;
  int root = 0;  // BROADCAST: the rank that sends; the others only receive
  v1::ReduceOp reduce = v1::REDUCE_UNSPECIFIED;  // ALL_REDUCE
  // The plane the header declares (CollectiveHeader.data_plane): DIRECT
  // on a DirectDataPlane, else left unset (the relay).
  v1::DataPlane data_plane = v1::DATA_PLANE_UNSPECIFIED;
  double weight = 1;  // ALL_REDUCE WEIGHTED_MEAN: this rank's example count
  // How long after a stream breaks it may be resumed (zero: never).
  absl::Duration resume_grace = absl::Seconds(10);
  // Test hook: break the first stream after this many payload bytes were
  // sent, or after this many frames were received (negative: never).
  int64_t break_after_bytes_sent = -1;
  int64_t break_after_frames_received = -1;
  TransferProgress* progress = nullptr;  // may be null
  Clock* clock = SystemClock();  // deadlines and backoff; must outlive it
  // When set, hears of every frame received, and Wait fails the call with
  // its status once the server has been silent too long (may be null).
  ServerLiveness* liveness = nullptr;
};

// What one collective moved, counting every stream it took.
struct TransferStats {
  int streams = 0;                 // 1, plus one per resume
  int64_t payload_bytes_sent = 0;  // chunk payload, resent bytes included
  int64_t payload_bytes_received = 0;
};

class CollectiveCall {
 public:
  // `inputs` and `target` must outlive Wait.
  CollectiveCall(CollectiveSetup setup,
                 absl::Span<const ConstHostTensor> inputs,
                 ReceiveTarget* target);

  // Prepare validates the inputs and copies this rank's part into the
  // target; nothing is sent. Start, after a successful Prepare, opens the
  // first stream on `plane`, which must outlive Wait.
  absl::Status Prepare();
  void Start(DataPlane* plane);

  // Wait blocks until the call is done, at most `timeout` (then it cancels
  // the call and returns DEADLINE_EXCEEDED), or until the setup's liveness
  // finds the server silent (then it cancels the call and returns that
  // UNAVAILABLE). Returns OK only when the commit arrived and every rank's
  // bytes matched their digests.
  absl::Status Wait(absl::Duration timeout);

  // Contributors are the ranks whose contributions the commit holds, in
  // order: every rank, or those a quorum round committed with. Valid after
  // Wait returned OK. The rows of ALL_GATHER ranks left out are zeros; the
  // ReceiveTarget is never asked to place other ops' left-out parts.
  const std::vector<int>& contributors() const { return contributors_; }
  // Stats is valid after Wait returned.
  const TransferStats& stats() const { return stats_; }

 private:
  // One stream of the collective: the first, or one that resumes it. It
  // handles its FrameStream's events (on the data plane's threads) and owns
  // the stream, which it outlives: it is destroyed only after `done`.
  class Attempt : public FrameHandler {
   public:
    Attempt(CollectiveCall* call, bool resume) : call_(call), resume_(resume) {}
    void Start(DataPlane* plane, grpc::ByteBuffer header);
    void Write(grpc::ByteBuffer frame) { stream_->Write(std::move(frame)); }
    void WritesDone() { stream_->WritesDone(); }
    void Cancel() { stream_->Cancel(); }
    // The status the stream ended with and whether the server ended it on
    // purpose (then it is not resumed).
    grpc::Status status;
    bool server_final = false;
    absl::Notification done;

   private:
    friend class CollectiveCall;
    void OnWritten(bool ok) override;
    bool OnFrame(grpc::ByteBuffer& frame) override;
    void OnEnded(const grpc::Status& status, bool server_final) override;

    CollectiveCall* const call_;
    const bool resume_;
    std::unique_ptr<FrameStream> stream_;    // set before it starts
    std::atomic<bool> write_failed_{false};  // Cancel came from a failed write
    // A resumed stream writes nothing after its header until the server's
    // Resumed frame has set the upload position.
    absl::Mutex mu_;
    bool header_written_ ABSL_GUARDED_BY(mu_) = false;
    bool position_known_ ABSL_GUARDED_BY(mu_) = false;
  };

  // Copies chunk payloads into the target and hashes them.
  class DownloadSink : public ChunkSink {
   public:
    explicit DownloadSink(CollectiveCall* call) : call_(call) {}
    absl::Status Begin(const ChunkMeta& meta) override;
    void Data(const uint8_t* data, size_t size) override;

   private:
    CollectiveCall* call_;
    uint8_t* dest_ = nullptr;
    ContentHasher* hasher_ = nullptr;
  };
  struct Part {  // one remote rank's contribution as it arrives
    explicit Part(DigestAlgorithm digest) : hasher(digest) {}
    bool have_header = false;
    Fingerprint fingerprint;
    std::optional<ChunkSequence> sequence;
    std::vector<uint8_t*> dest;  // by tensor
    ContentHasher hasher;
  };

  // Sends is whether `rank` uploads bytes (all but BROADCAST's non-roots).
  bool Sends(int rank) const;
  // StartAttempt opens a stream; `resume` for every one after the first.
  void StartAttempt(bool resume);
  // WriteNext writes the next chunk, the end, or half-closes.
  void WriteNext(Attempt* attempt);
  // HandleRead handles a received frame; false when the stream must stop.
  bool HandleRead(Attempt* attempt, grpc::ByteBuffer& frame);
  absl::Status HandleFrame(Attempt* attempt, grpc::ByteBuffer& frame);
  absl::Status HandleHeader(const v1::CollectiveHeader& header);
  absl::Status HandleResumed(const v1::Resumed& resumed);
  absl::Status HandleCommit(const v1::Commit& commit);
  // ContributionDigest is the digest of this rank's whole contribution.
  Digest ContributionDigest() const;
  void Abort(Attempt* attempt, const absl::Status& status);
  // AwaitAttempt waits for the running stream to end; past `deadline`, or
  // once the server is found silent, it aborts it first.
  void AwaitAttempt(absl::Time deadline, absl::Duration timeout);

  const CollectiveSetup setup_;
  const absl::Span<const ConstHostTensor> inputs_;
  ReceiveTarget* const target_;
  DataPlane* plane_ = nullptr;
  Fingerprint fingerprint_;
  std::vector<int64_t> input_bytes_;
  v1::CollectiveFrame header_frame_;  // the first stream's header
  std::unique_ptr<Attempt> attempt_;  // the stream running now
  TransferStats stats_;

  // Write path (one write in flight).
  size_t write_tensor_ = 0;
  int64_t write_offset_ = 0;
  bool end_sent_ = false;
  ContentHasher own_hasher_;       // hashes each chunk as it is sent
  bool own_digest_known_ = false;  // a resume computed it up front
  Digest own_digest_{};

  // Read path (one read in flight).
  // By rank; this rank's entry is unused. ALL_REDUCE has one more, at index
  // world size: the result.
  std::vector<Part> parts_;
  uint64_t frames_received_ = 0;  // headers and chunks, over every stream
  bool committed_ = false;
  std::vector<int> contributors_;

  absl::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);  // first client-side error
};

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_COLLECTIVE_CALL_H_
