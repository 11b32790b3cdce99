// NcclCommunicators: NCCL communicators that span the nodes of a fedgather
// Group, bootstrapped through the rendezvous (ShareNcclUniqueId,
// nccl_unique_id.h). Node n's local GPU g is global rank n * G + g of N * G,
// the same order as AllGatherToDevices. NCCL then moves its data over its own
// transports, not through fedgather and not encrypted (docs/security.md).
#ifndef FEDGATHER_CLIENT_NCCL_NCCL_COMMUNICATORS_H_
#define FEDGATHER_CLIENT_NCCL_NCCL_COMMUNICATORS_H_

#include <nccl.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "client/group.h"

namespace fedgather {

class NcclCommunicators {
 public:
  // Create checks `cuda_devices` locally (INVALID_ARGUMENT naming an entry
  // that is negative or repeated, before any CUDA call, or out of range of
  // cudaGetDeviceCount; the runtime's error for a device it cannot make
  // current), then that every node brings the same number of GPUs (one
  // ALL_GATHER_BYTES; a node whose local check failed counts as none, so
  // every rank fails: INVALID_ARGUMENT naming the counts, or the node's own
  // error), shares an ncclUniqueId from rank 0, then initializes one
  // communicator per CUDA device in `cuda_devices` (ncclCommInitRank in one
  // group). A collective of `group`: every member calls it at the same
  // point, and it blocks until every GPU of every node has joined. A failure
  // inside the group fails the whole group (no local init runs on) and
  // aborts the communicators it created; the other nodes' inits then wait
  // for ranks that never come. Errors: the group's, the unique id's
  // (ShareNcclUniqueId, nccl_unique_id.h) and NCCL's (nccl_status.h).
  static absl::StatusOr<std::unique_ptr<NcclCommunicators>> Create(
      Group& group, std::vector<int> cuda_devices,
      const CollectiveOptions& options = {});
  ~NcclCommunicators();  // ncclCommDestroy for each

  int size() const { return size_; }  // N * G
  int local_count() const { return static_cast<int>(comms_.size()); }
  // For local GPU g: its communicator, global rank and CUDA ordinal.
  ncclComm_t comm(int g) const { return comms_[g]; }
  int global_rank(int g) const { return first_rank_ + g; }
  int cuda_device(int g) const { return devices_[g]; }

 private:
  NcclCommunicators() = default;

  int size_ = 0;
  int first_rank_ = 0;
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
};

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_NCCL_NCCL_COMMUNICATORS_H_
