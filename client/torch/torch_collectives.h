// The torch::Tensor adapter of Group (fg_client_torch, built when
// FEDGATHER_WITH_TORCH finds LibTorch): free functions that turn tensors
// into host buffer views, allocate outputs with LibTorch and run Group's raw
// collectives. Only this library and its callers link LibTorch.
//
// Inputs must be contiguous CPU tensors (INVALID_ARGUMENT otherwise, and
// nothing is sent). The errors are Group's (client/group.h), plus INTERNAL
// for a LibTorch error (its c10::Error never escapes). Each ...Async form
// queues the collective on the group, in order with the group's other
// collectives, and holds a reference to its tensors until its Work
// completes; the blocking form is the Async one followed by Wait (or Get).
// Thread safety: as Group's collectives, from any thread.
#ifndef FEDGATHER_CLIENT_TORCH_TORCH_COLLECTIVES_H_
#define FEDGATHER_CLIENT_TORCH_TORCH_COLLECTIVES_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/group.h"
#include "client/work.h"

namespace at {
class Tensor;
}  // namespace at

namespace fedgather::client::torch {

// AllGather returns [world, *shape] of every rank's `input`.
absl::StatusOr<at::Tensor> AllGather(Group& group, const at::Tensor& input,
                                     const CollectiveOptions& options = {});
Work<at::Tensor> AllGatherAsync(Group& group, const at::Tensor& input,
                                const CollectiveOptions& options = {});

// AllGather over a name -> tensor map; returns name -> [world, *shape].
absl::StatusOr<std::map<std::string, at::Tensor>> AllGather(
    Group& group, const std::map<std::string, at::Tensor>& inputs,
    const CollectiveOptions& options = {});
Work<std::map<std::string, at::Tensor>> AllGatherAsync(
    Group& group, const std::map<std::string, at::Tensor>& inputs,
    const CollectiveOptions& options = {});

// AllGatherInto writes into a caller-allocated contiguous [world, *shape].
absl::Status AllGatherInto(Group& group, const at::Tensor& input,
                           at::Tensor& output,
                           const CollectiveOptions& options = {});
Work<> AllGatherIntoAsync(Group& group, const at::Tensor& input,
                          const at::Tensor& output,
                          const CollectiveOptions& options = {});

// AllGatherV returns each rank's part at its own size, in rank order (a
// rank a quorum round left out gives a part of 0 rows).
absl::StatusOr<std::vector<at::Tensor>> AllGatherV(
    Group& group, const at::Tensor& input,
    const CollectiveOptions& options = {});
Work<std::vector<at::Tensor>> AllGatherVAsync(
    Group& group, const at::Tensor& input,
    const CollectiveOptions& options = {});

// AllReduce returns the reduction of every rank's `input` (a new tensor of
// its shape and dtype); over a name -> tensor map, name -> result.
absl::StatusOr<at::Tensor> AllReduce(Group& group, const at::Tensor& input,
                                     v1::ReduceOp op, double weight = 1,
                                     const CollectiveOptions& options = {});
Work<at::Tensor> AllReduceAsync(Group& group, const at::Tensor& input,
                                v1::ReduceOp op, double weight = 1,
                                const CollectiveOptions& options = {});
absl::StatusOr<std::map<std::string, at::Tensor>> AllReduce(
    Group& group, const std::map<std::string, at::Tensor>& inputs,
    v1::ReduceOp op, double weight = 1, const CollectiveOptions& options = {});
Work<std::map<std::string, at::Tensor>> AllReduceAsync(
    Group& group, const std::map<std::string, at::Tensor>& inputs,
    v1::ReduceOp op, double weight = 1, const CollectiveOptions& options = {});

// Broadcast overwrites `tensor` (contiguous, CPU) on every rank but `root`
// with the root's, in place, as torch.distributed.broadcast does.
absl::Status Broadcast(Group& group, at::Tensor& tensor, int root,
                       const CollectiveOptions& options = {});
Work<> BroadcastAsync(Group& group, const at::Tensor& tensor, int root,
                      const CollectiveOptions& options = {});

}  // namespace fedgather::client::torch

#endif  // FEDGATHER_CLIENT_TORCH_TORCH_COLLECTIVES_H_
