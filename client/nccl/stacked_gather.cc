#include "client/nccl/stacked_gather.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace fedgather {

absl::StatusOr<DeviceGatherResult> AllGatherStackedToDevices(
    Group& group, LocalCollective& local,
    absl::Span<const ConstHostTensor> inputs,
    const CollectiveOptions& options) {
  const int devices = local.device_count();
  const int64_t ranks = int64_t{group.world_size()} * devices;
  // Each device's input and output tensors, and the memory behind them.
  std::vector<std::vector<ConstDeviceTensor>> dev_in(devices);
  std::vector<std::vector<MutableDeviceTensor>> dev_out(devices);
  std::vector<LocalBuffer> memory;
  for (const ConstHostTensor& in : inputs) {
    if (in.spec.shape.empty() || in.spec.shape[0] != devices) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", SpecToString(in.spec), " must be [", devices,
                       ", ...]: one slice per local device"));
    }
    TensorSpec part = in.spec;
    part.shape.erase(part.shape.begin());
    TensorSpec gathered = part;
    gathered.shape.insert(gathered.shape.begin(), ranks);
    FG_ASSIGN_OR_RETURN(const int64_t bytes, ByteSize(part));
    for (int g = 0; g < devices; ++g) {
      FG_ASSIGN_OR_RETURN(LocalBuffer input, local.AllocateDevice(g, bytes));
      FG_ASSIGN_OR_RETURN(LocalBuffer output,
                          local.AllocateDevice(g, bytes * ranks));
      FG_RETURN_IF_ERROR(local.CopyToDevice(
          g, input.data(), static_cast<const uint8_t*>(in.data) + g * bytes,
          bytes));
      dev_in[g].push_back({part, input.data()});
      dev_out[g].push_back({gathered, output.data()});
      memory.push_back(std::move(input));
      memory.push_back(std::move(output));
    }
  }
  FG_RETURN_IF_ERROR(local.Synchronize());
  FG_ASSIGN_OR_RETURN(
      DeviceGatherResult result,
      AllGatherToDevices(group, local, dev_in, dev_out, options));

  // Every device's copy against the host's, one device at a time.
  for (size_t t = 0; t < result.tensors.size(); ++t) {
    const int64_t bytes = result.buffers[t].bytes();
    FG_ASSIGN_OR_RETURN(LocalBuffer back, local.AllocateHost(bytes));
    for (int g = 0; g < devices; ++g) {
      FG_RETURN_IF_ERROR(
          local.CopyToHost(g, back.data(), dev_out[g][t].data, bytes));
      FG_RETURN_IF_ERROR(local.Synchronize());
      if (bytes > 0 && std::memcmp(back.data(), result.buffers[t].data(),
                                   static_cast<size_t>(bytes)) != 0) {
        return absl::DataLossError(absl::StrCat(
            "local device ", g, "'s result for '", result.tensors[t].spec.name,
            "' differs from the host's"));
      }
    }
  }
  return result;
}

}  // namespace fedgather
