// Group: the collectives this participant runs in a formed group. Made by
// Client::Join; its Session (client/session.h) holds the membership.
//
// Its collectives work on host buffers (ConstHostTensor / MutableHostTensor)
// and link no LibTorch: the torch::Tensor forms are free functions over a
// Group in client/torch/torch_collectives.h (fg_client_torch), the NCCL
// unique id's sharing in client/nccl/nccl_unique_id.h (fg_client_nccl).
// Every collective blocks until it completes on every rank or fails (its
// ...Async form returns a Work that does); the status is the same on every
// rank:
//   INVALID_ARGUMENT    a dtype, shape or name differs between ranks, or bad
//                       local input (then nothing is sent)
//   FAILED_PRECONDITION ranks called different ops or seqs; the group ended
//   UNAVAILABLE         a member disconnected (the message names it); or
//                       the server sent nothing for the group's heartbeat
//                       timeout (the message names the server): the group
//                       is then over on this side, every later collective
//                       fails with that status
//   DEADLINE_EXCEEDED   the round deadline passed (lists who is missing);
//                       in a quorum group, fewer than min_quorum had started
//   FAILED_PRECONDITION (also) this rank came after its quorum round closed
//                       without it; the group carries on with the next seq
//   DATA_LOSS           received bytes do not match the committed digests
// Thread safety: every method may be called from any thread; collectives
// run one at a time, in the order they were called.
#ifndef FEDGATHER_CLIENT_GROUP_H_
#define FEDGATHER_CLIENT_GROUP_H_

#include <grpcpp/channel.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/collective_call.h"
#include "client/collective_queue.h"
#include "client/direct_data_plane.h"
#include "client/peer/peer_offer.h"
#include "client/peer/peer_ring.h"
#include "client/relay_data_plane.h"
#include "client/session.h"
#include "client/work.h"
#include "common/clock.h"
#include "common/tensor_spec.h"
#include "common/tls_credentials.h"
#include "fedgather/v1/fedgather.grpc.pb.h"

namespace fedgather {

struct CollectiveOptions {
  // Client-side bound on one collective. The server's round deadline is the
  // primary one; this only guards against a server that stops answering.
  absl::Duration timeout = absl::Hours(1);
  // When set, receives the ranks whose contributions the round committed,
  // in order, before the collective completes successfully. That is every
  // rank, except in a group with a min_quorum, where a round may close at
  // its deadline without the ranks that had not started: then their
  // ALL_GATHER rows are zeros, their ALL_GATHER_V parts and
  // ALL_GATHER_BYTES strings are empty, and an ALL_REDUCE (MEAN and
  // WEIGHTED_MEAN included) reduces the contributors only. The memory must
  // stay valid until the collective completes.
  std::vector<int>* contributors = nullptr;
  // A collective stream that breaks (the connection, not the round) is
  // resumed within this grace: the upload goes on from what the server
  // holds, the download from what this rank has. Zero: a break fails it.
  absl::Duration resume_grace = absl::Seconds(10);
  // The size of the chunks this rank cuts its upload into: 0 for the
  // server's chunk limit (Joined.max_chunk_bytes, the fewest frames), else
  // 1 to that limit; anything else is refused with INVALID_ARGUMENT before
  // anything is sent. Ranks need not agree, and a chunk may end inside an
  // element (docs/protocol.md).
  int64_t upload_chunk_bytes = 0;
  // When set, receives what the collective moved, counting every stream.
  TransferStats* stats = nullptr;
  // When set, is updated as the collective runs (a progress display reads
  // it from another thread); must stay valid until it completes.
  TransferProgress* progress = nullptr;
  // Test hook: breaks the collective's first stream after this many payload
  // bytes were sent or frames received (negative: never).
  int64_t break_after_bytes_sent = -1;
  int64_t break_after_frames_received = -1;
  // Test hook, direct plane only: sees each ring chunk this rank forwards
  // (RingOptions::forward_hook) and may change it.
  std::function<void(int part, char* data, size_t size)> direct_forward_hook;
};

class Group {
 public:
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  // Leaves the group: closes the session, which ends the epoch for the
  // other members.
  ~Group();

  const std::string& name() const { return session_.name(); }
  int rank() const { return session_.rank(); }
  int world_size() const { return session_.world_size(); }
  uint64_t epoch() const { return session_.epoch(); }
  // The hash this epoch names contributions by (the group policy's
  // `digest`, announced in Joined).
  DigestAlgorithm digest_algorithm() const {
    return session_.digest_algorithm();
  }
  // identities()[r] is the certificate identity of rank r.
  const std::vector<std::string>& identities() const {
    return session_.identities();
  }
  // peer_endpoints()[r] is the peer endpoint rank r offered ("" for none).
  const std::vector<std::string>& peer_endpoints() const {
    return session_.peer_endpoints();
  }
  // This member's offer to the direct data plane: its peer TLS and the
  // listener admitting this epoch's links (client/peer/peer_offer.h). Null
  // when it joined without JoinOptions::peer_listen.
  const PeerOffer* peer_offer() const { return peer_offer_.get(); }
  // The plane the epoch's collectives run on now (docs/protocol.md,
  // "Data planes"), and why: the server's choice when the epoch formed
  // (Joined.data_plane), until a round of the epoch fails, after which
  // this member and the server both fall back to the relay for good.
  v1::DataPlane data_plane() const;
  std::string data_plane_reason() const;

  // Every collective has a blocking form and an ...Async form that returns
  // a Work at once (client/work.h); the blocking form is the Async one
  // followed by Wait (or Get). Collectives of a Group run one at a time, in
  // the order they were started, from any thread. An Async raw-buffer call
  // copies the tensor descriptors but not their memory: inputs and outputs
  // must stay valid until its Work completes. Torch forms hold references
  // to their tensors. Local argument errors complete the Work with
  // INVALID_ARGUMENT, and nothing is sent.

  // AllGatherInto gathers every rank's `inputs` into `outputs`, where
  // outputs[i] has inputs[i]'s name and dtype and shape [world, *shape];
  // rank r's part lands at offset r * ByteSize(inputs[i].spec). Received
  // bytes are written straight into the outputs.
  absl::Status AllGatherInto(absl::Span<const ConstHostTensor> inputs,
                             absl::Span<const MutableHostTensor> outputs,
                             const CollectiveOptions& options = {});
  Work<> AllGatherIntoAsync(absl::Span<const ConstHostTensor> inputs,
                            absl::Span<const MutableHostTensor> outputs,
                            const CollectiveOptions& options = {});

  // PartAllocator returns memory for rank `rank`'s tensor `index` of `spec`;
  // it is called from a gRPC thread, once per (rank, tensor).
  using PartAllocator = std::function<absl::StatusOr<void*>(
      int rank, int index, const TensorSpec& spec)>;

  // AllGatherV gathers tensors whose first dimension may differ per rank;
  // each part is written, exact-size, into memory from `allocate`.
  absl::Status AllGatherV(absl::Span<const ConstHostTensor> inputs,
                          const PartAllocator& allocate,
                          const CollectiveOptions& options = {});
  Work<> AllGatherVAsync(absl::Span<const ConstHostTensor> inputs,
                         PartAllocator allocate,
                         const CollectiveOptions& options = {});

  // AllGatherBytes gathers one opaque byte string from every rank (metrics,
  // small serialized objects); returns them in rank order, each as sent.
  absl::StatusOr<std::vector<std::string>> AllGatherBytes(
      absl::string_view bytes, const CollectiveOptions& options = {});
  Work<std::vector<std::string>> AllGatherBytesAsync(
      std::string bytes, const CollectiveOptions& options = {});

  // Broadcast sends `tensors` from rank `root` to every rank: on the root
  // they are read, on the others they are overwritten with the root's bytes.
  // Every rank passes the same names, dtypes and shapes and the same root
  // (INVALID_ARGUMENT otherwise, on every rank).
  absl::Status Broadcast(absl::Span<const MutableHostTensor> tensors, int root,
                         const CollectiveOptions& options = {});
  Work<> BroadcastAsync(absl::Span<const MutableHostTensor> tensors, int root,
                        const CollectiveOptions& options = {});

  // AllReduce reduces every rank's `inputs` element-wise with `op` (on the
  // server as the chunks arrive on the relay; by a ring reduce-scatter and
  // all_gather on the direct plane, in the order client/peer/
  // ring_all_reduce.h documents) and writes the result into `outputs`
  // (outputs[i] has inputs[i]'s spec; it may be the same memory). `weight`
  // is this rank's example count for WEIGHTED_MEAN (FedAvg); it must be
  // positive. Floating tensors accumulate in fp32 (fp64 for F64), integers
  // exactly; MEAN and WEIGHTED_MEAN take floating tensors only and BOOL
  // cannot be reduced (INVALID_ARGUMENT on every rank).
  absl::Status AllReduce(absl::Span<const ConstHostTensor> inputs,
                         absl::Span<const MutableHostTensor> outputs,
                         v1::ReduceOp op, double weight = 1,
                         const CollectiveOptions& options = {});
  Work<> AllReduceAsync(absl::Span<const ConstHostTensor> inputs,
                        absl::Span<const MutableHostTensor> outputs,
                        v1::ReduceOp op, double weight = 1,
                        const CollectiveOptions& options = {});

  // InQueue runs the raw collectives in place, for a body given to Submit:
  // each call blocks on the collective queue's thread until its collective
  // completes. Made only by Group; valid only during that body.
  class InQueue {
   public:
    int world_size() const { return group_.world_size(); }
    absl::Status AllGatherInto(absl::Span<const ConstHostTensor> inputs,
                               absl::Span<const MutableHostTensor> outputs,
                               const CollectiveOptions& options) {
      return group_.RunAllGatherInto(inputs, outputs, options);
    }
    absl::Status AllGatherV(absl::Span<const ConstHostTensor> inputs,
                            const PartAllocator& allocate,
                            const CollectiveOptions& options) {
      return group_.RunAllGatherV(inputs, allocate, options);
    }
    absl::Status Broadcast(absl::Span<const MutableHostTensor> tensors,
                           int root, const CollectiveOptions& options) {
      return group_.RunBroadcast(tensors, root, options);
    }
    absl::Status AllReduce(absl::Span<const ConstHostTensor> inputs,
                           absl::Span<const MutableHostTensor> outputs,
                           v1::ReduceOp op, double weight,
                           const CollectiveOptions& options) {
      return group_.RunAllReduce(inputs, outputs, op, weight, options);
    }

   private:
    friend class Group;
    explicit InQueue(Group& group) : group_(group) {}
    Group& group_;
  };

  // Submit queues `body` with this group's collectives and returns its Work
  // at once: the body runs on the queue's thread, after every collective
  // started before it, and runs its collectives through the InQueue it is
  // given. It is how an adapter (client/torch/) holds its own values (its
  // tensors, by value in the body's captures) for as long as a collective
  // runs; those captures are destroyed before the Work completes. A body
  // still queued when the group is left never runs: its Work completes
  // with CANCELLED. The body must not throw, and must not wait on another
  // Work of this group (that Work runs after it).
  template <typename T>
  Work<T> Submit(std::function<absl::StatusOr<T>(InQueue&)> body);

 private:
  friend class Client;
  // `server` (HOST:PORT) names the server in errors.
  // `clock` (ClientOptions::clock) must outlive the group.
  Group(std::shared_ptr<grpc::Channel> channel, std::string server,
        std::string name, absl::Duration resume_grace, Clock* clock);

  // Join joins the group (Session::Join) and blocks until it forms. With
  // `offer` (whose endpoint `request` carries) it then opens the offer for
  // the formed epoch with `tls`, and keeps it.
  absl::Status Join(const v1::JoinRequest& request, absl::Duration timeout,
                    absl::Duration connect_timeout,
                    std::unique_ptr<PeerOffer> offer, const TlsFiles& tls);
  // Enqueue runs `body` on the collective queue and returns its Work.
  template <typename T>
  Work<T> Enqueue(std::function<absl::StatusOr<T>()> body);

  // The collectives themselves, run on the queue's thread.
  absl::Status RunAllGatherInto(absl::Span<const ConstHostTensor> inputs,
                                absl::Span<const MutableHostTensor> outputs,
                                const CollectiveOptions& options);
  // RunAllGatherV runs ALL_GATHER_V, or `op` (ALL_GATHER_BYTES).
  absl::Status RunAllGatherV(absl::Span<const ConstHostTensor> inputs,
                             const PartAllocator& allocate,
                             const CollectiveOptions& options,
                             v1::Op op = v1::ALL_GATHER_V);
  absl::Status RunBroadcast(absl::Span<const MutableHostTensor> tensors,
                            int root, const CollectiveOptions& options);
  absl::Status RunAllReduce(absl::Span<const ConstHostTensor> inputs,
                            absl::Span<const MutableHostTensor> outputs,
                            v1::ReduceOp op, double weight,
                            const CollectiveOptions& options);
  // Run runs one collective; `setup` gives root, reduce and weight where
  // the op uses them (the rest is filled in here).
  absl::Status Run(CollectiveSetup setup,
                   absl::Span<const ConstHostTensor> inputs,
                   ReceiveTarget* target, const CollectiveOptions& options);

  // ~Group resets it first: its listener's threads report refusals
  // through the session.
  std::unique_ptr<PeerOffer> peer_offer_;
  Session session_;  // the membership: join, heartbeats, resume, leave
  RelayDataPlane data_plane_;  // carries the collectives' bytes
  // A direct epoch's peer links and the plane over them (null otherwise).
  std::unique_ptr<PeerRing> ring_;
  std::unique_ptr<DirectDataPlane> direct_plane_;
  mutable absl::Mutex plane_mu_;
  v1::DataPlane epoch_plane_ ABSL_GUARDED_BY(plane_mu_) = v1::DATA_PLANE_RELAY;
  std::string epoch_plane_reason_ ABSL_GUARDED_BY(plane_mu_);
  Clock* const clock_;
  uint64_t next_seq_ = 0;  // used only on the queue's thread
  CollectiveQueue queue_;  // runs every collective, in order
};

template <typename T>
Work<T> Group::Submit(std::function<absl::StatusOr<T>(InQueue&)> body) {
  return Enqueue<T>([this, body = std::move(body)]() -> absl::StatusOr<T> {
    InQueue in_queue(*this);
    return body(in_queue);
  });
}

template <typename T>
Work<T> Group::Enqueue(std::function<absl::StatusOr<T>()> body) {
  auto [work, completer] = Work<T>::Make();
  queue_.Add([body = std::move(body), completer = std::move(completer)](
                 const absl::Status& refused) mutable {
    absl::StatusOr<T> outcome =
        refused.ok() ? body() : absl::StatusOr<T>(refused);
    // The body's captures (the caller's tensors) go before the Work
    // completes, so a caller that saw it complete holds the last reference.
    body = nullptr;
    completer.Complete(std::move(outcome));
  });
  return work;
}

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_GROUP_H_
