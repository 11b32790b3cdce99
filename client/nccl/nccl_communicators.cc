#include "client/nccl/nccl_communicators.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/group.h"
#include "client/nccl/cuda_device_guard.h"
#include "client/nccl/nccl_status.h"
#include "client/nccl/nccl_unique_id.h"
#include "common/status_macros.h"

namespace fedgather {

namespace {

// CheckLocalDevices: the node's own list, before it joins: not empty, no
// negative or repeated entry (before any CUDA call), each below
// cudaGetDeviceCount and each one the runtime can make current, so that
// the cudaSetDevice calls inside the group below fail only for a device
// lost in between.
absl::Status CheckLocalDevices(const std::vector<int>& cuda_devices) {
  if (cuda_devices.empty()) {
    return absl::InvalidArgumentError("no CUDA devices to join with");
  }
  FG_RETURN_IF_ERROR(CheckCudaDevices(cuda_devices));
  FG_ASSIGN_OR_RETURN(const int visible, CudaDeviceCount());
  FG_RETURN_IF_ERROR(CheckCudaDevices(cuda_devices, visible));
  CudaDeviceGuard device_guard;
  for (int d : cuda_devices) {
    FG_RETURN_IF_ERROR(
        CudaStatus(cudaSetDevice(d), absl::StrCat("cudaSetDevice(", d, ")")));
  }
  return absl::OkStatus();
}

// FailOpenGroup makes the open ncclGroupStart section fail, so that
// ncclGroupEnd runs none of it. A CUDA error is invisible to NCCL, and
// ncclCommInitRank returns its own cudaGetDevice failure without marking
// the group: ncclGroupEnd would then run the ncclCommInitRank calls already
// queued, and those would wait for ever for the local ranks that never
// joined. An NCCL call that fails inside a group marks the group failed
// (NCCL's ncclGroupError, src/group.cc), and ncclGroupEnd then cleans up
// its queued work and returns that error; a collective on a null
// communicator fails so before it touches CUDA. Read in NCCL 2.19-2.28's
// source; no GPU here exercises it.
void FailOpenGroup() {
  (void)ncclAllGather(nullptr, nullptr, 0, ncclInt8, /*comm=*/nullptr,
                      /*stream=*/nullptr);
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicators>> NcclCommunicators::Create(
    Group& group, std::vector<int> cuda_devices,
    const CollectiveOptions& options) {
  const int local = static_cast<int>(cuda_devices.size());
  // A node whose own list fails says so to the others through the count
  // exchange, so every node fails now instead of waiting in NCCL's init for
  // ranks that never come.
  const absl::Status checked = CheckLocalDevices(cuda_devices);
  const std::string mine =
      checked.ok() ? std::to_string(local)
                   : absl::StrCat("none (", checked.ToString(), ")");
  FG_ASSIGN_OR_RETURN(const std::vector<std::string> counts,
                      group.AllGatherBytes(mine, options));
  FG_RETURN_IF_ERROR(checked);
  for (const std::string& c : counts) {
    if (c != counts[0]) {
      return absl::InvalidArgumentError(
          absl::StrCat("the nodes bring different numbers of GPUs (by rank: ",
                       absl::StrJoin(counts, ", "), ")"));
    }
  }
  FG_ASSIGN_OR_RETURN(const NcclUniqueIdBytes id_bytes,
                      ShareNcclUniqueId(group, options));
  ncclUniqueId id;
  std::memcpy(id.internal, id_bytes.data(), id_bytes.size());

  std::unique_ptr<NcclCommunicators> comms(new NcclCommunicators());
  comms->size_ = group.world_size() * local;
  comms->first_rank_ = group.rank() * local;
  comms->devices_ = std::move(cuda_devices);
  comms->comms_.assign(local, nullptr);
  CudaDeviceGuard device_guard;
  FG_RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
  absl::Status status;
  for (int g = 0; g < local && status.ok(); ++g) {
    status =
        CudaStatus(cudaSetDevice(comms->devices_[g]),
                   absl::StrCat("cudaSetDevice(", comms->devices_[g],
                                ") for global rank ", comms->global_rank(g)));
    if (status.ok()) {
      status =
          NcclStatus(ncclCommInitRank(&comms->comms_[g], comms->size_, id,
                                      comms->global_rank(g)),
                     absl::StrCat("ncclCommInitRank of global rank ",
                                  comms->global_rank(g), " of ", comms->size_));
    }
    if (!status.ok()) FailOpenGroup();
  }
  // A group that was started is ended, whatever happened inside it.
  const absl::Status ended = NcclStatus(ncclGroupEnd(), "ncclGroupEnd");
  if (!status.ok() || !ended.ok()) {
    // What NCCL created of a failed init is aborted, not destroyed.
    for (ncclComm_t& comm : comms->comms_) {
      if (comm != nullptr) (void)ncclCommAbort(comm);
      comm = nullptr;
    }
    return status.ok() ? ended : status;
  }
  return comms;
}

NcclCommunicators::~NcclCommunicators() {
  for (ncclComm_t comm : comms_) {
    if (comm != nullptr) ncclCommDestroy(comm);
  }
}

}  // namespace fedgather
