#include "client/nccl/nccl_communicators.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/group.h"
#include "client/nccl/nccl_status.h"
#include "client/nccl/nccl_unique_id.h"
#include "common/status_macros.h"

namespace fedgather {

absl::StatusOr<std::unique_ptr<NcclCommunicators>> NcclCommunicators::Create(
    Group& group, std::vector<int> cuda_devices,
    const CollectiveOptions& options) {
  const int local = static_cast<int>(cuda_devices.size());
  FG_ASSIGN_OR_RETURN(const std::vector<std::string> counts,
                      group.AllGatherBytes(std::to_string(local), options));
  for (const std::string& c : counts) {
    if (c != counts[0]) {
      return absl::InvalidArgumentError(
          absl::StrCat("the nodes bring different numbers of GPUs (by rank: ",
                       absl::StrJoin(counts, ", "), ")"));
    }
  }
  if (local == 0) {
    return absl::InvalidArgumentError("no CUDA devices to join with");
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
  FG_RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
  absl::Status status;
  for (int g = 0; g < local && status.ok(); ++g) {
    status = CudaStatus(cudaSetDevice(comms->devices_[g]), "cudaSetDevice");
    if (!status.ok()) break;
    status =
        NcclStatus(ncclCommInitRank(&comms->comms_[g], comms->size_, id,
                                    comms->global_rank(g)),
                   absl::StrCat("ncclCommInitRank of global rank ",
                                comms->global_rank(g), " of ", comms->size_));
  }
  const absl::Status ended = NcclStatus(ncclGroupEnd(), "ncclGroupEnd");
  FG_RETURN_IF_ERROR(status);
  FG_RETURN_IF_ERROR(ended);
  return comms;
}

NcclCommunicators::~NcclCommunicators() {
  for (ncclComm_t comm : comms_) {
    if (comm != nullptr) ncclCommDestroy(comm);
  }
}

}  // namespace fedgather
