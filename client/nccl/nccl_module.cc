// The NCCL module's two exports (nccl_module.h), over NcclLocalCollective.
#include "client/nccl/nccl_module.h"

#include <vector>

#include "client/nccl/nccl_local_collective.h"
#include "fedgather/config.h"

const char* fedgather_nccl_module_abi() { return FEDGATHER_NCCL_MODULE_ABI; }

void fedgather_nccl_module_create(const int* cuda_devices, int count,
                                  fedgather::LocalCollectiveOrError* out) {
  absl::StatusOr<std::unique_ptr<fedgather::NcclLocalCollective>> nccl =
      fedgather::NcclLocalCollective::Create(
          std::vector<int>(cuda_devices, cuda_devices + count));
  if (!nccl.ok()) {
    *out = nccl.status();
    return;
  }
  *out = std::unique_ptr<fedgather::LocalCollective>(std::move(*nccl));
}
