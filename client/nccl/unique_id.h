// ShareFromRankZero: how ShareNcclUniqueId (nccl_unique_id.h) hands the
// bytes rank 0 made to every member, kept apart from NCCL so that it builds
// and is tested without it.
#ifndef FEDGATHER_CLIENT_NCCL_UNIQUE_ID_H_
#define FEDGATHER_CLIENT_NCCL_UNIQUE_ID_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "client/group.h"

namespace fedgather {

// The bytes of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES), kept as bytes so
// that this header and fg_local_collective need no NCCL.
inline constexpr size_t kNcclUniqueIdBytes = 128;
using NcclUniqueIdBytes = std::array<uint8_t, kNcclUniqueIdBytes>;

// ShareFromRankZero: rank 0 calls `create`; every rank gets its bytes over
// the group's authenticated collective (one ALL_GATHER_BYTES: rank 0's
// contribution is the id, the others' are empty), so they reach only the
// members the server's policy admitted to this epoch, and the audit log
// records only the contribution's digest. Nothing here logs the bytes.
// When `create` fails on rank 0, every rank fails with FAILED_PRECONDITION
// carrying rank 0's error. Blocks; a collective of `group` (it spends one
// seq, so every member must call it at the same point).
absl::StatusOr<NcclUniqueIdBytes> ShareFromRankZero(
    Group& group,
    const std::function<absl::StatusOr<NcclUniqueIdBytes>()>& create,
    const CollectiveOptions& options = {});

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_NCCL_UNIQUE_ID_H_
