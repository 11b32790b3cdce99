#include "client/nccl/nccl_unique_id.h"

#include <nccl.h>

#include <cstring>

#include "client/nccl/nccl_status.h"
#include "common/status_macros.h"

namespace fedgather {

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes,
              "NCCL_UNIQUE_ID_BYTES changed");

absl::StatusOr<NcclUniqueIdBytes> ShareNcclUniqueId(
    Group& group, const CollectiveOptions& options) {
  return ShareFromRankZero(
      group,
      []() -> absl::StatusOr<NcclUniqueIdBytes> {
        ncclUniqueId id;
        FG_RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
        NcclUniqueIdBytes bytes;
        std::memcpy(bytes.data(), id.internal, bytes.size());
        return bytes;
      },
      options);
}

}  // namespace fedgather
