#include "client/nccl/hierarchical_all_gather.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace fedgather {
namespace {

// WithLeading returns `spec` with `dims` put in front of its shape.
TensorSpec WithLeading(TensorSpec spec, std::vector<int64_t> dims) {
  spec.shape.insert(spec.shape.begin(), dims.begin(), dims.end());
  return spec;
}

// CheckArguments checks the shapes of `inputs` and `outputs` against device
// 0's input specs; returns each tensor's bytes per rank.
absl::StatusOr<std::vector<int64_t>> CheckArguments(
    int world, int devices,
    absl::Span<const std::vector<ConstDeviceTensor>> inputs,
    absl::Span<const std::vector<MutableDeviceTensor>> outputs) {
  if (inputs.size() != static_cast<size_t>(devices) ||
      outputs.size() != static_cast<size_t>(devices)) {
    return absl::InvalidArgumentError(
        absl::StrCat(devices, " local devices but inputs for ", inputs.size(),
                     " and outputs for ", outputs.size()));
  }
  const std::vector<ConstDeviceTensor>& first = inputs[0];
  if (first.empty()) {
    return absl::InvalidArgumentError("no tensors to gather");
  }
  std::vector<int64_t> sizes;
  for (const ConstDeviceTensor& t : first) {
    FG_ASSIGN_OR_RETURN(const int64_t bytes, ByteSize(t.spec));
    sizes.push_back(bytes);
  }
  for (int g = 0; g < devices; ++g) {
    if (inputs[g].size() != first.size() || outputs[g].size() != first.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ", g, " has ", inputs[g].size(), " inputs and ",
                       outputs[g].size(), " outputs; device 0 has ",
                       first.size(), " inputs"));
    }
    for (size_t t = 0; t < first.size(); ++t) {
      const TensorSpec& spec = first[t].spec;
      if (inputs[g][t].spec != spec) {
        return absl::InvalidArgumentError(
            absl::StrCat("device ", g, "'s input ", t, " is ",
                         SpecToString(inputs[g][t].spec), " but device 0's is ",
                         SpecToString(spec)));
      }
      const TensorSpec expected = WithLeading(spec, {int64_t{world} * devices});
      if (outputs[g][t].spec != expected) {
        return absl::InvalidArgumentError(
            absl::StrCat("device ", g, "'s output ", t, " is ",
                         SpecToString(outputs[g][t].spec), " but must be ",
                         SpecToString(expected)));
      }
      if (sizes[t] > 0 &&
          (inputs[g][t].data == nullptr || outputs[g][t].data == nullptr)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "device ", g, "'s tensor '", spec.name, "' has no memory"));
      }
    }
  }
  return sizes;
}

uint8_t* At(const MutableDeviceTensor& t, int64_t offset) {
  return static_cast<uint8_t*>(t.data) + offset;
}

}  // namespace

absl::StatusOr<DeviceGatherResult> AllGatherToDevices(
    Group& group, LocalCollective& local,
    absl::Span<const std::vector<ConstDeviceTensor>> inputs,
    absl::Span<const std::vector<MutableDeviceTensor>> outputs,
    const CollectiveOptions& options) {
  const int world = group.world_size();
  const int node = group.rank();
  const int devices = local.device_count();
  FG_ASSIGN_OR_RETURN(const std::vector<int64_t> sizes,
                      CheckArguments(world, devices, inputs, outputs));
  const size_t count = sizes.size();

  DeviceGatherResult result;
  for (size_t t = 0; t < count; ++t) {
    FG_ASSIGN_OR_RETURN(LocalBuffer host,
                        local.AllocateHost(sizes[t] * world * devices));
    result.tensors.push_back(
        {WithLeading(inputs[0][t].spec, {int64_t{world} * devices}),
         host.data()});
    result.buffers.push_back(std::move(host));
  }

  // 1. Local: this node's block on every device and on the host.
  std::vector<LocalAllGather> local_ops;
  for (size_t t = 0; t < count; ++t) {
    const int64_t block = int64_t{node} * devices * sizes[t];
    LocalAllGather op;
    op.bytes = sizes[t];
    for (int g = 0; g < devices; ++g) {
      op.sends.push_back(inputs[g][t].data);
      op.recvs.push_back(At(outputs[g][t], block));
      FG_RETURN_IF_ERROR(local.CopyToHost(
          g, result.buffers[t].bytes_data() + block + g * sizes[t],
          inputs[g][t].data, sizes[t]));
    }
    local_ops.push_back(std::move(op));
  }
  FG_RETURN_IF_ERROR(local.AllGather(local_ops));
  FG_RETURN_IF_ERROR(local.Synchronize());

  // 2. Network: the node's block, gathered in place into the host result
  // (Group::AllGatherInto skips the copy of an input that is its own slot).
  std::vector<ConstHostTensor> block_in;
  std::vector<MutableHostTensor> gathered;
  for (size_t t = 0; t < count; ++t) {
    const TensorSpec& spec = inputs[0][t].spec;
    block_in.push_back(
        {WithLeading(spec, {devices}),
         result.buffers[t].bytes_data() + int64_t{node} * devices * sizes[t]});
    gathered.push_back(
        {WithLeading(spec, {world, devices}), result.buffers[t].data()});
  }
  FG_RETURN_IF_ERROR(group.AllGatherInto(block_in, gathered, options));

  // 3. Hand-off: the other nodes' blocks, one shard per device, then an
  // in-place all_gather per range.
  std::vector<LocalAllGather> handoff;
  for (size_t t = 0; t < count; ++t) {
    const int64_t node_block = int64_t{devices} * sizes[t];
    const int64_t ranges[2][2] = {
        {0, node * node_block}, {(node + 1) * node_block, world * node_block}};
    for (const auto& [begin, end] : ranges) {
      if (end <= begin) continue;
      const int64_t shard = (end - begin) / devices;
      LocalAllGather op;
      op.bytes = shard;
      for (int g = 0; g < devices; ++g) {
        uint8_t* mine = At(outputs[g][t], begin + g * shard);
        FG_RETURN_IF_ERROR(local.CopyToDevice(
            g, mine, result.buffers[t].bytes_data() + begin + g * shard,
            shard));
        op.sends.push_back(mine);
        op.recvs.push_back(At(outputs[g][t], begin));
      }
      handoff.push_back(std::move(op));
    }
  }
  FG_RETURN_IF_ERROR(local.AllGather(handoff));
  FG_RETURN_IF_ERROR(local.Synchronize());
  return result;
}

}  // namespace fedgather
