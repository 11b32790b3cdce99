// AllGatherStackedToDevices: AllGatherToDevices for a node whose G inputs
// are stacked in host memory, as `fedgather join --gpus G` reads them from
// one file: tensor t is [G, *shape] and slice g is local device g's input.
// It allocates the devices' memory, runs the hierarchical all_gather, and
// then reads every device's result back and compares it with the host
// result, byte for byte, since the caller keeps only the host copy.
#ifndef FEDGATHER_CLIENT_NCCL_STACKED_GATHER_H_
#define FEDGATHER_CLIENT_NCCL_STACKED_GATHER_H_

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/group.h"
#include "client/nccl/hierarchical_all_gather.h"
#include "client/nccl/local_collective.h"

namespace fedgather {

// AllGatherStackedToDevices returns the host result: tensor t stacked
// [N * G, *shape] in global rank order. Errors: INVALID_ARGUMENT when an
// input's first dimension is not G (nothing is sent); DATA_LOSS naming the
// device and tensor whose result differs from the host's; AllGatherToDevices'
// errors. Blocks.
absl::StatusOr<DeviceGatherResult> AllGatherStackedToDevices(
    Group& group, LocalCollective& local,
    absl::Span<const ConstHostTensor> inputs,
    const CollectiveOptions& options = {});

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_NCCL_STACKED_GATHER_H_
