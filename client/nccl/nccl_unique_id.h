// ShareNcclUniqueId: the bootstrap of a cross-node NCCL communicator over a
// fedgather Group (fg_client_nccl, built when fedgather/config.h says
// FEDGATHER_HAVE_NCCL; link it to use this).
#ifndef FEDGATHER_CLIENT_NCCL_NCCL_UNIQUE_ID_H_
#define FEDGATHER_CLIENT_NCCL_NCCL_UNIQUE_ID_H_

#include "absl/status/statusor.h"
#include "client/group.h"
#include "client/nccl/unique_id.h"

namespace fedgather {

// ShareNcclUniqueId: rank 0 of `group` creates an ncclUniqueId
// (ncclGetUniqueId) and every member receives it over the group's
// authenticated collective, so only the members the policy admitted to this
// epoch get it; the server's audit log records its digest, never its
// bytes, and nothing logs them. It is a collective (one ALL_GATHER_BYTES
// seq): every member calls it at the same point, and it blocks until it
// completes. Rank 0's failure to create one is FAILED_PRECONDITION on every
// rank; the other errors are the group's. NCCL's own traffic over the
// communicator is not encrypted (docs/security.md).
absl::StatusOr<NcclUniqueIdBytes> ShareNcclUniqueId(
    Group& group, const CollectiveOptions& options = {});

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_NCCL_NCCL_UNIQUE_ID_H_
