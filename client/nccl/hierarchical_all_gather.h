// AllGatherToDevices: the hierarchical all_gather of a node with G local
// devices that is one member (node rank n of N) of a fedgather Group. Global
// rank = n * G + g for local device g. Afterwards every local device holds
// all N * G contributions in global rank order, and so does the host.
//
// It is composed of three steps (docs/gpu.md draws them):
//   1. local: each device's input goes to its own slot of every local
//      device's output (one LocalCollective all_gather), and each device
//      copies its own input to its slot of the host result (D2H, S bytes
//      per device);
//   2. network: Group::AllGatherInto of the node's block (the host result's
//      slot n, [G, *shape]) into the host result ([N, G, *shape]);
//   3. hand-off: the host bytes of the other nodes (the ranges before and
//      after this node's block) are split into G shards; device g copies
//      only shard g (pinned H2D) and one in-place all_gather per range
//      assembles them on every device. So each device moves (N-1)*S bytes
//      over PCIe, never the whole remote result (N-1)*G*S.
//
// It is a free function over Group's public AllGatherInto rather than a
// Group method: it needs no private state of Group, and client/group.h and
// fg_client stay free of device types (docs/gpu.md).
#ifndef FEDGATHER_CLIENT_NCCL_HIERARCHICAL_ALL_GATHER_H_
#define FEDGATHER_CLIENT_NCCL_HIERARCHICAL_ALL_GATHER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/group.h"
#include "client/nccl/local_collective.h"

namespace fedgather {

// The host copy of a hierarchical all_gather's result.
struct DeviceGatherResult {
  // tensors[t]: tensor t of every global rank, [N * G, *shape], in global
  // rank order; its memory is buffers[t] (LocalCollective::AllocateHost).
  std::vector<ConstHostTensor> tensors;
  std::vector<LocalBuffer> buffers;
};

// AllGatherToDevices runs the hierarchical all_gather. inputs[g] are device
// g's T tensors in its memory (the same names, dtypes and shapes on every
// device and every node); outputs[g][t] is device g's memory for tensor t,
// spec [N * G, *shape]. Blocks until every device holds the result, on the
// calling thread (which drives `local`). Errors: INVALID_ARGUMENT for
// local arguments that do not fit (nothing is sent); the network
// collective's status (the same on every node, client/group.h: a node with
// another G or other shapes is INVALID_ARGUMENT everywhere); the local
// collective's errors (CUDA/NCCL failures, nccl_status.h). A node that fails
// before the network step leaves the others waiting for the round deadline.
//
// Streams: it enqueues only on `local`'s own queues (NcclLocalCollective:
// one stream per GPU, created cudaStreamNonBlocking, so not even the legacy
// default stream orders them) and does not wait for work on any other
// stream. So the inputs must be complete in device memory when it is called,
// and no other stream may still read or write the outputs: work the caller
// queued on another stream (PyTorch's current stream, cudaMemset on the
// legacy default stream) must be finished first (cudaStreamSynchronize,
// torch.cuda.current_stream().synchronize()) or ordered before `local`'s
// streams with NcclLocalCollective::WaitForStreams. On return every
// output and the host result are complete (it synchronizes its streams), so
// any stream may use them. Inputs must stay unchanged until it returns.
absl::StatusOr<DeviceGatherResult> AllGatherToDevices(
    Group& group, LocalCollective& local,
    absl::Span<const std::vector<ConstDeviceTensor>> inputs,
    absl::Span<const std::vector<MutableDeviceTensor>> outputs,
    const CollectiveOptions& options = {});

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_NCCL_HIERARCHICAL_ALL_GATHER_H_
