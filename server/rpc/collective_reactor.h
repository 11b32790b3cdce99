// CollectiveReactor: the server side of one member's Collective stream for
// one round, on raw byte buffers. Its read path validates the header, attaches
// to the round, checks every chunk's place (ChunkSequence), hashes the bytes
// and hands each frame to the round's log unchanged; its write path pulls the
// other ranks' frames and the commit from the round (NextOutgoing). Once
// attached, it moves bytes only through the round's RoundDataPlane
// (server/control/round_data_plane.h): chunks, the end, what to write next,
// a lost stream.
//
// On the direct plane (docs/protocol.md, "Data planes") the stream carries
// the header, the end with the rank's claimed digest, then the rank's
// Delivery; it writes the other ranks' headers, the claims and the commit.
//
// Threading: gRPC runs reactions on its callback threads; the round calls
// WakeWriter and ResumeReading from any thread, never under its lock. At most
// one read and one write are in flight. mu_ guards the write state; the read
// state is touched only from the read path. Lock order: mu_, then the round's.
#ifndef FEDGATHER_SERVER_RPC_COLLECTIVE_REACTOR_H_
#define FEDGATHER_SERVER_RPC_COLLECTIVE_REACTOR_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/chunk_sequence.h"
#include "common/clock.h"
#include "common/content_hasher.h"
#include "common/fingerprint.h"
#include "common/frame_codec.h"
#include "server/access/access_control.h"
#include "server/membership/group_registry.h"
#include "server/relay/round.h"
#include "server/rpc/first_frame_deadlines.h"

namespace fedgather::server {

class CollectiveReactor
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
      public RoundStream,
      public FirstFrameWaiter,
      public std::enable_shared_from_this<CollectiveReactor> {
 public:
  // Start creates a reactor that keeps itself alive until OnDone. When
  // `admission` is an error the stream is finished with it at once. The
  // header is authorized by `access` (role participant) and checked against
  // the caller's contribution limits.
  // `context` outlives the reactor; a stream finished by the server (not
  // broken) carries the trailing metadata kFinalStatusKey, so the client
  // knows not to resume it. An admitted stream is watched by
  // `first_frame`: without a header by its deadline it is refused.
  static CollectiveReactor* Start(grpc::CallbackServerContext* context,
                                  GroupRegistry* registry,
                                  AccessControl* access,
                                  FirstFrameDeadlines* first_frame,
                                  absl::StatusOr<Admission> admission,
                                  int64_t max_chunk_bytes, Clock* clock);

  void WakeWriter() override;
  void ResumeReading() override;
  // Refuses the stream with DEADLINE_EXCEEDED (audited as a refused
  // collective) unless its header has arrived.
  void ExpireFirstFrameWait(absl::Duration limit) override;

 private:
  // Validates each chunk's place and hashes its bytes as they are decoded.
  class UploadSink : public ChunkSink {
   public:
    explicit UploadSink(CollectiveReactor* reactor) : reactor_(reactor) {}
    // Called by the frame decoder on the read path, under read_mu_.
    absl::Status Begin(const ChunkMeta& meta)
        ABSL_EXCLUSIVE_LOCKS_REQUIRED(reactor_->read_mu_) override;
    void Data(const uint8_t* data, size_t size)
        ABSL_EXCLUSIVE_LOCKS_REQUIRED(reactor_->read_mu_) override;
    uint64_t size() const { return meta_.size; }
    const ChunkMeta& meta() const { return meta_; }
    // The chunk's bytes, contiguous; kept only for ALL_REDUCE, whose round
    // reduces them instead of forwarding the frame.
    const std::string& bytes() const { return bytes_; }

   private:
    CollectiveReactor* reactor_;
    ChunkMeta meta_;
    std::string bytes_;
  };

  CollectiveReactor(grpc::CallbackServerContext* context,
                    GroupRegistry* registry, AccessControl* access,
                    Admission admission, int64_t max_chunk_bytes, Clock* clock);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  // Each returns true when the next frame should be read.
  // HandleDelivery takes a direct round's Delivery: OK confirms the
  // rank's parts (Round::ConfirmDelivery), any other code fails the round
  // on every rank with it.
  absl::StatusOr<bool> HandleDelivery(const v1::Delivery& delivery,
                                      PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(read_mu_);
  absl::StatusOr<bool> HandleHeader(const v1::CollectiveHeader& header,
                                    PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(read_mu_);
  absl::StatusOr<bool> HandleFrame(v1::CollectiveFrame::KindCase kind,
                                   const v1::CollectiveFrame& frame,
                                   const UploadSink& chunk,
                                   PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(read_mu_);
  // RejectUpload fails the round (or, before one, this stream) with a status
  // naming this rank.
  void RejectUpload(const absl::Status& status, PendingCallbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(read_mu_);
  void FinishWithoutRound(const absl::Status& status);
  // FinishWith finishes the stream with the server's final `status`.
  void FinishWith(const absl::Status& status);
  // LoseStream tells the round this stream broke, once, and stops every
  // later call into the round from this reactor.
  void LoseStream(absl::string_view why);
  std::shared_ptr<Round> round();
  // plane is round() as the data plane that moves this stream's bytes.
  std::shared_ptr<RoundDataPlane> plane();
  // StreamName names the stream before its header: "the collective stream
  // of 'IDENTITY' from PEER".
  std::string StreamName() const;

  grpc::CallbackServerContext* const context_;

  GroupRegistry* const registry_;
  AccessControl* const access_;
  const Caller caller_;
  IdentityUsage::Lease stream_lease_;  // released when the reactor is freed
  // One of the caller's max_rounds_in_flight, from an accepted header until
  // the reactor is freed.
  IdentityUsage::Lease round_lease_;
  const int64_t max_chunk_bytes_;
  Clock* const clock_;
  std::shared_ptr<CollectiveReactor> self_;  // released in OnDone
  bool counted_ = false;  // an admitted stream, counted in the metrics

  // Serializes the read path with LoseStream, so no frame of this stream
  // reaches the round after it was detached. Lock order: read_mu_, mu_.
  absl::Mutex read_mu_;
  // Read path only (under read_mu_). gRPC fills read_buffer_ while a read
  // is in flight, when the read path does not touch it.
  enum class Phase { kHeader, kChunks, kEnded };
  Phase phase_ ABSL_GUARDED_BY(read_mu_) = Phase::kHeader;
  grpc::ByteBuffer read_buffer_ ABSL_GUARDED_BY(read_mu_);
  // As the header declares it.
  Fingerprint fingerprint_ ABSL_GUARDED_BY(read_mu_);
  // What this rank uploads (none: a broadcast's non-root); sequence_ refers
  // to it.
  Fingerprint upload_ ABSL_GUARDED_BY(read_mu_);
  std::optional<ChunkSequence> sequence_ ABSL_GUARDED_BY(read_mu_);
  // The hash of this rank's upload, in the round's algorithm: set with the
  // header (or taken over from a resumed stream).
  std::optional<ContentHasher> hasher_ ABSL_GUARDED_BY(read_mu_);
  // The round runs on the direct plane: no chunks come, the end's digest
  // is the rank's claim, and a Delivery follows it (delivered_ once seen).
  bool direct_ ABSL_GUARDED_BY(read_mu_) = false;
  bool delivered_ ABSL_GUARDED_BY(read_mu_) = false;
  int rank_ = -1;  // set before the round can call back; then constant
  v1::Op op_ = v1::OP_UNSPECIFIED;
  GroupState* group_ = nullptr;  // the round's group, for liveness
  uint64_t epoch_ = 0;
  // Set when access control already reported this stream's refusal.
  bool refusal_reported_ ABSL_GUARDED_BY(read_mu_) = false;

  absl::Mutex mu_;
  std::shared_ptr<Round> round_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer write_buffer_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool lost_ ABSL_GUARDED_BY(mu_) = false;  // LoseStream ran
  // A resumed stream first writes the Resumed frame.
  std::optional<grpc::ByteBuffer> resumed_reply_ ABSL_GUARDED_BY(mu_);
  bool reply_in_flight_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_RPC_COLLECTIVE_REACTOR_H_
