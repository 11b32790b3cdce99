// Group: this participant's membership of a formed group, and the
// collectives it runs there. Made by Client::Join.
//
// The raw methods work on host buffers (ConstHostTensor / MutableHostTensor)
// and link no LibTorch; the torch::Tensor methods are a thin adapter defined
// in the fg_client_torch library. Every method blocks until the collective
// completes on every rank or fails; the status is the same on every rank:
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
#include <grpcpp/generic/generic_stub.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/collective_call.h"
#include "client/collective_queue.h"
#include "client/server_liveness.h"
#include "client/work.h"
#include "common/tensor_spec.h"
#include "fedgather/v1/fedgather.grpc.pb.h"

namespace at {
class Tensor;
}  // namespace at

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
};

// The bytes of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES), kept as bytes so
// that this header and fg_client need no NCCL.
inline constexpr size_t kNcclUniqueIdBytes = 128;
using NcclUniqueIdBytes = std::array<uint8_t, kNcclUniqueIdBytes>;

class Group {
 public:
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  // Leaves the group: closes the session, which ends the epoch for the
  // other members.
  ~Group();

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  uint64_t epoch() const { return epoch_; }
  // identities()[r] is the certificate identity of rank r.
  const std::vector<std::string>& identities() const { return identities_; }

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

  // AllReduce reduces every rank's `inputs` element-wise with `op` on the
  // server, as the chunks arrive, and writes the result into `outputs`
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

  // ShareNcclUniqueId bootstraps a cross-node NCCL communicator: rank 0
  // creates an ncclUniqueId (ncclGetUniqueId) and every member receives it
  // over this group's authenticated collective, so only the members the
  // policy admitted to this epoch get it; the server's audit log records
  // its SHA-256, never its bytes, and nothing logs them. It is a collective
  // (one ALL_GATHER_BYTES seq): every member calls it at the same point.
  // Rank 0's failure to create one is FAILED_PRECONDITION on every rank.
  // Defined in fg_client_nccl (client/nccl/group_nccl.cc), built when
  // fedgather/config.h says FEDGATHER_HAVE_NCCL; link it to use this. NCCL's
  // own traffic over the communicator is not encrypted (docs/security.md).
  absl::StatusOr<NcclUniqueIdBytes> ShareNcclUniqueId(
      const CollectiveOptions& options = {});

  // torch adapter (fg_client_torch). Inputs must be contiguous CPU tensors.
  // AllGather returns [world, *shape].
  absl::StatusOr<at::Tensor> AllGather(const at::Tensor& input,
                                       const CollectiveOptions& options = {});
  Work<at::Tensor> AllGatherAsync(const at::Tensor& input,
                                  const CollectiveOptions& options = {});
  // AllGather over a name -> tensor map; returns name -> [world, *shape].
  absl::StatusOr<std::map<std::string, at::Tensor>> AllGather(
      const std::map<std::string, at::Tensor>& inputs,
      const CollectiveOptions& options = {});
  Work<std::map<std::string, at::Tensor>> AllGatherAsync(
      const std::map<std::string, at::Tensor>& inputs,
      const CollectiveOptions& options = {});
  // AllGatherInto writes into a caller-allocated contiguous [world, *shape].
  absl::Status AllGatherInto(const at::Tensor& input, at::Tensor& output,
                             const CollectiveOptions& options = {});
  Work<> AllGatherIntoAsync(const at::Tensor& input, const at::Tensor& output,
                            const CollectiveOptions& options = {});
  // AllGatherV returns each rank's part at its own size, in rank order.
  absl::StatusOr<std::vector<at::Tensor>> AllGatherV(
      const at::Tensor& input, const CollectiveOptions& options = {});
  Work<std::vector<at::Tensor>> AllGatherVAsync(
      const at::Tensor& input, const CollectiveOptions& options = {});
  // AllReduce returns the reduction of every rank's `input` (a new tensor of
  // its shape and dtype); over a name -> tensor map, name -> result.
  absl::StatusOr<at::Tensor> AllReduce(const at::Tensor& input, v1::ReduceOp op,
                                       double weight = 1,
                                       const CollectiveOptions& options = {});
  Work<at::Tensor> AllReduceAsync(const at::Tensor& input, v1::ReduceOp op,
                                  double weight = 1,
                                  const CollectiveOptions& options = {});
  absl::StatusOr<std::map<std::string, at::Tensor>> AllReduce(
      const std::map<std::string, at::Tensor>& inputs, v1::ReduceOp op,
      double weight = 1, const CollectiveOptions& options = {});
  Work<std::map<std::string, at::Tensor>> AllReduceAsync(
      const std::map<std::string, at::Tensor>& inputs, v1::ReduceOp op,
      double weight = 1, const CollectiveOptions& options = {});
  // Broadcast overwrites `tensor` (contiguous, CPU) on every rank but `root`
  // with the root's, in place, as torch.distributed.broadcast does.
  absl::Status Broadcast(at::Tensor& tensor, int root,
                         const CollectiveOptions& options = {});
  Work<> BroadcastAsync(const at::Tensor& tensor, int root,
                        const CollectiveOptions& options = {});

 private:
  friend class Client;
  // `server` (HOST:PORT) names the server in errors.
  Group(std::shared_ptr<grpc::Channel> channel, std::string server,
        std::string name, absl::Duration resume_grace);

  // Join writes the join request and blocks until the group forms (at most
  // `timeout`). A stream that broke before the server answered is opened
  // again, with backoff, for up to `connect_timeout`.
  absl::Status Join(const v1::JoinRequest& request, absl::Duration timeout,
                    absl::Duration connect_timeout);
  // OpenSession opens a session stream, writes `request` and reads the
  // Joined answer (at most `timeout`); `server_final` tells whether a
  // failure came from the server's decision rather than a broken stream.
  absl::StatusOr<v1::Joined> OpenSession(const v1::JoinRequest& request,
                                         absl::Duration timeout,
                                         bool* server_final);
  // RunSession reads the session until it ends; a broken one is resumed
  // (ResumeSession) within the grace.
  void RunSession();
  absl::Status ResumeSession(absl::string_view why);
  void StartHeartbeats();
  void StopHeartbeats();
  // CheckServer returns liveness_'s verdict; when the server is silent it
  // also ends the session with that status (no resume).
  absl::Status CheckServer();
  // Enqueue runs `body` on the collective queue and returns its Work.
  template <typename T>
  Work<T> Enqueue(std::function<absl::StatusOr<T>()> body);

  // EnqueueTorch is Enqueue for a body that may throw c10::Error
  // (defined in group_torch.cc, the one file that includes LibTorch).
  template <typename T, typename Body>
  Work<T> EnqueueTorch(Body body);

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

  std::unique_ptr<v1::Rendezvous::Stub> stub_;
  grpc::GenericStub generic_stub_;
  const std::string name_;
  int rank_ = 0;
  int world_size_ = 0;
  uint64_t epoch_ = 0;
  int64_t max_chunk_bytes_ = 0;
  absl::Duration heartbeat_interval_;
  absl::Duration heartbeat_timeout_;
  // What this member has heard from the server lately; watched while a
  // session stream is established.
  ServerLiveness liveness_;
  std::vector<std::string> identities_;
  uint64_t next_seq_ = 0;  // used only on the queue's thread

  const absl::Duration resume_grace_;
  // The session stream now; replaced only by the session thread, while no
  // heartbeat thread runs, under write_mu_, which every write holds.
  absl::Mutex write_mu_;
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionEvent>>
      session_;
  std::thread session_thread_;       // reads until the session ends
  absl::Notification session_over_;  // the session thread is done
  std::thread heartbeat_thread_;     // one per session stream
  std::unique_ptr<absl::Notification> stop_heartbeats_;
  absl::Notification leave_;  // wakes a resume's backoff

  absl::Mutex mu_;
  // The context of the session stream now (cancelled to leave).
  std::unique_ptr<grpc::ClientContext> session_context_ ABSL_GUARDED_BY(mu_);
  absl::Status session_status_ ABSL_GUARDED_BY(mu_);  // set when it ends
  bool leaving_ ABSL_GUARDED_BY(mu_) = false;

  CollectiveQueue queue_;  // runs every collective, in order
};

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
