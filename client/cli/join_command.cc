#include "client/cli/join_command.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/cli/progress_reporter.h"
#include "client/client.h"
#include "client/nccl/cpu_local_collective.h"
#include "client/nccl/nccl_module_loader.h"
#include "client/nccl/stacked_gather.h"
#include "client/part_buffer.h"
#include "common/data_plane_name.h"
#include "common/file_io.h"
#include "common/safetensors.h"
#include "common/status_macros.h"
#include "common/tls_credentials.h"

namespace fedgather::cli {
namespace {

// Owned output tensors and the metadata the output file gets.
struct Result {
  std::vector<std::vector<uint8_t>> memory;
  std::vector<ConstHostTensor> tensors;
  std::map<std::string, std::string> metadata;
  int64_t bytes = 0;

  // Add keeps `data` and returns memory for a tensor of `spec`.
  uint8_t* Add(TensorSpec spec, std::vector<uint8_t> data) {
    bytes += static_cast<int64_t>(data.size());
    memory.push_back(std::move(data));
    tensors.push_back(ConstHostTensor{std::move(spec), memory.back().data()});
    return memory.back().data();
  }
};

absl::StatusOr<Result> AllGather(Group& group,
                                 absl::Span<const ConstHostTensor> inputs,
                                 const CollectiveOptions& options) {
  Result result;
  std::vector<MutableHostTensor> outputs;
  for (const ConstHostTensor& in : inputs) {
    FG_ASSIGN_OR_RETURN(const int64_t bytes, ByteSize(in.spec));
    TensorSpec spec = in.spec;
    spec.shape.insert(spec.shape.begin(), group.world_size());
    uint8_t* data =
        result.Add(spec, std::vector<uint8_t>(bytes * group.world_size()));
    outputs.push_back(MutableHostTensor{spec, data});
  }
  FG_RETURN_IF_ERROR(group.AllGatherInto(inputs, outputs, options));
  return result;
}

absl::StatusOr<Result> AllGatherV(Group& group,
                                  absl::Span<const ConstHostTensor> inputs,
                                  const CollectiveOptions& options) {
  const int world = group.world_size();
  // parts[i][r]: rank r's part of tensor i.
  std::vector<std::vector<PartBuffer>> parts(inputs.size());
  for (auto& tensor_parts : parts) tensor_parts.resize(world);
  std::vector<std::vector<TensorSpec>> specs(inputs.size(),
                                             std::vector<TensorSpec>(world));
  const Group::PartAllocator allocate =
      [&](int rank, int index,
          const TensorSpec& spec) -> absl::StatusOr<void*> {
    FG_ASSIGN_OR_RETURN(const int64_t bytes, ByteSize(spec));
    specs[index][rank] = spec;
    return parts[index][rank].Allocate(static_cast<size_t>(bytes));
  };
  FG_RETURN_IF_ERROR(group.AllGatherV(inputs, allocate, options));
  Result result;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TensorSpec spec = inputs[i].spec;
    spec.shape[0] = 0;
    std::vector<uint8_t> joined;
    std::vector<int64_t> split;
    for (int r = 0; r < world; ++r) {
      spec.shape[0] += specs[i][r].shape[0];
      split.push_back(specs[i][r].shape[0]);
      const PartBuffer& part = parts[i][r];
      joined.insert(joined.end(), part.data(), part.data() + part.size());
    }
    result.metadata["fedgather.split." + spec.name] = absl::StrJoin(split, ",");
    result.Add(std::move(spec), std::move(joined));
  }
  return result;
}

absl::StatusOr<Result> AllGatherBytes(Group& group, absl::string_view bytes,
                                      const CollectiveOptions& options) {
  FG_ASSIGN_OR_RETURN(std::vector<std::string> gathered,
                      group.AllGatherBytes(bytes, options));
  Result result;
  for (size_t r = 0; r < gathered.size(); ++r) {
    result.Add(TensorSpec{absl::StrCat("bytes.", r),
                          DType::kU8,
                          {static_cast<int64_t>(gathered[r].size())}},
               std::vector<uint8_t>(gathered[r].begin(), gathered[r].end()));
  }
  return result;
}

absl::StatusOr<Result> Broadcast(Group& group,
                                 absl::Span<const ConstHostTensor> inputs,
                                 int root, const CollectiveOptions& options) {
  Result result;
  std::vector<MutableHostTensor> tensors;
  for (const ConstHostTensor& in : inputs) {
    FG_ASSIGN_OR_RETURN(const int64_t bytes, ByteSize(in.spec));
    const uint8_t* from = static_cast<const uint8_t*>(in.data);
    uint8_t* data = result.Add(
        in.spec, group.rank() == root
                     ? std::vector<uint8_t>(from, from + bytes)
                     : std::vector<uint8_t>(static_cast<size_t>(bytes)));
    tensors.push_back(MutableHostTensor{in.spec, data});
  }
  FG_RETURN_IF_ERROR(group.Broadcast(tensors, root, options));
  return result;
}

absl::StatusOr<Result> AllReduce(Group& group,
                                 absl::Span<const ConstHostTensor> inputs,
                                 v1::ReduceOp op, double weight,
                                 const CollectiveOptions& options) {
  Result result;
  std::vector<MutableHostTensor> outputs;
  for (const ConstHostTensor& in : inputs) {
    FG_ASSIGN_OR_RETURN(const int64_t bytes, ByteSize(in.spec));
    uint8_t* data =
        result.Add(in.spec, std::vector<uint8_t>(static_cast<size_t>(bytes)));
    outputs.push_back(MutableHostTensor{in.spec, data});
  }
  FG_RETURN_IF_ERROR(group.AllReduce(inputs, outputs, op, weight, options));
  return result;
}

// MakeLocalCollective returns the node's `gpus` GPUs (CUDA devices 0..G-1)
// through the NCCL module at `nccl_module` (empty: NcclModulePath()), or
// their emulation in host memory.
LocalCollectiveOrError MakeLocalCollective(int gpus, bool emulate,
                                           const std::string& nccl_module) {
  if (emulate) return std::make_unique<CpuLocalCollective>(gpus);
  std::vector<int> devices;
  for (int g = 0; g < gpus; ++g) devices.push_back(g);
  LocalCollectiveOrError local = LoadNcclLocalCollective(
      nccl_module.empty() ? NcclModulePath() : nccl_module, devices);
  if (!local.ok()) {
    return absl::Status(
        local.status().code(),
        absl::StrCat("--gpus ", gpus, ": ", local.status().message(),
                     "; --emulate-gpus runs the same path in host memory"));
  }
  return local;
}

// AllGatherToGpus runs the hierarchical all_gather of a node's stacked
// inputs (client/nccl/stacked_gather.h) and keeps the host result.
absl::StatusOr<Result> AllGatherToGpus(Group& group, LocalCollective& local,
                                       absl::Span<const ConstHostTensor> inputs,
                                       const CollectiveOptions& options) {
  FG_ASSIGN_OR_RETURN(DeviceGatherResult gathered,
                      AllGatherStackedToDevices(group, local, inputs, options));
  Result result;
  for (size_t t = 0; t < gathered.tensors.size(); ++t) {
    const uint8_t* data = gathered.buffers[t].bytes_data();
    result.Add(gathered.tensors[t].spec,
               std::vector<uint8_t>(data, data + gathered.buffers[t].bytes()));
  }
  result.metadata["fedgather.gpus"] = absl::StrCat(local.device_count());
  return result;
}

absl::StatusOr<v1::ReduceOp> ParseReduce(const std::string& name) {
  v1::ReduceOp op;
  if (!v1::ReduceOp_Parse(absl::AsciiStrToUpper(name), &op) ||
      op == v1::REDUCE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("--reduce ", name,
                     " is not one of sum, mean, min, max, weighted_mean"));
  }
  return op;
}

// TotalsFor is what this rank's collective will send and receive: known
// for all_gather, all_reduce and broadcast, whose sizes follow from this
// rank's inputs; the download of all_gather_v and all_gather_bytes depends on
// the other ranks. Whose headers arrive: the other ranks', except in an
// all_reduce, where only the result comes back.
ProgressTotals TotalsFor(const JoinCommandOptions& options, const Group& group,
                         absl::Span<const ConstHostTensor> inputs,
                         int64_t raw_bytes) {
  int64_t mine = raw_bytes;
  for (const ConstHostTensor& input : inputs) {
    mine += ByteSize(input.spec).value_or(0);
  }
  const int others = group.world_size() - 1;
  ProgressTotals totals;
  totals.upload_bytes = mine;
  totals.other_ranks = options.op == "all_reduce" ? -1 : others;
  if (options.op == "all_gather") {
    totals.download_bytes = mine * others;
  } else if (options.op == "all_reduce") {
    totals.download_bytes = mine;
  } else if (options.op == "broadcast") {
    const bool root = group.rank() == options.root;
    totals.upload_bytes = root ? mine : 0;
    totals.download_bytes = root ? 0 : mine;
    totals.other_ranks = root ? 0 : 1;
  }
  return totals;
}

}  // namespace

absl::Status RunJoin(const JoinCommandOptions& options) {
  const bool bytes_op = options.op == "all_gather_bytes";
  if (!bytes_op && options.op != "all_gather" && options.op != "all_gather_v" &&
      options.op != "all_reduce" && options.op != "broadcast") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--op ", options.op,
        " is not one of all_gather, all_gather_v, all_gather_bytes, "
        "all_reduce, broadcast"));
  }
  FG_ASSIGN_OR_RETURN(const v1::ReduceOp reduce, ParseReduce(options.reduce));
  if (options.gpus < 0 || (options.gpus > 0 && options.op != "all_gather")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gpus ", options.gpus, " takes a positive count, with all_gather"));
  }
  std::unique_ptr<LocalCollective> local;
  if (options.gpus > 0) {
    FG_ASSIGN_OR_RETURN(local,
                        MakeLocalCollective(options.gpus, options.emulate_gpus,
                                            options.nccl_module));
  }
  std::string raw_input;
  std::vector<ConstHostTensor> inputs;
  std::optional<SafetensorsFile> input;
  if (bytes_op) {
    FG_ASSIGN_OR_RETURN(raw_input, ReadFileToString(options.input));
  } else {
    FG_ASSIGN_OR_RETURN(input, SafetensorsFile::ReadFile(options.input));
    inputs = input->Views();
    if (inputs.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          options.input, " holds no tensors; nothing to contribute"));
    }
  }
  ClientOptions client_options;
  client_options.server_address = options.server;
  client_options.clock = options.clock;
  FG_ASSIGN_OR_RETURN(client_options.tls, ReadTlsDir(options.tls_dir));
  client_options.tls.insecure_plaintext_for_benchmarks =
      options.insecure_plaintext_for_benchmarks;
  FG_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                      Client::Connect(client_options));
  JoinOptions join;
  join.group = options.group;
  join.world_size = options.world_size;
  join.rank = options.rank;
  join.timeout = options.timeout;
  join.peer_listen = options.peer_listen;
  join.peer_advertise = options.peer_advertise;
  FG_ASSIGN_OR_RETURN(std::unique_ptr<Group> group, client->Join(join));

  CollectiveOptions collective;
  collective.timeout = options.timeout;
  TransferProgress progress;
  collective.progress = &progress;
  const absl::Time start = options.clock->Now();
  // The plane this op runs on (a failure makes the epoch fall back).
  const v1::DataPlane plane = group->data_plane();
  const std::string plane_reason = group->data_plane_reason();
  absl::StatusOr<Result> result;
  {
    std::optional<ProgressReporter> reporter;
    if (!options.quiet) {
      reporter.emplace(&progress,
                       TotalsFor(options, *group, inputs, raw_input.size()),
                       ::isatty(STDERR_FILENO) == 1, stderr, absl::Seconds(2),
                       options.clock);
    }
    result =
        bytes_op ? AllGatherBytes(*group, raw_input, collective)
        : options.op == "all_gather_v" ? AllGatherV(*group, inputs, collective)
        : options.op == "broadcast"
            ? Broadcast(*group, inputs, options.root, collective)
        : options.op == "all_reduce"
            ? AllReduce(*group, inputs, reduce, options.weight, collective)
        : local != nullptr ? AllGatherToGpus(*group, *local, inputs, collective)
                           : AllGather(*group, inputs, collective);
  }
  if (!result.ok()) return result.status();
  const absl::Duration took = options.clock->Now() - start;

  const int world = group->world_size();
  std::map<std::string, std::string>& metadata = result->metadata;
  metadata["fedgather.group"] = group->name();
  metadata["fedgather.epoch"] = absl::StrCat(group->epoch());
  metadata["fedgather.world_size"] = absl::StrCat(world);
  metadata["fedgather.op"] = options.op;
  metadata["fedgather.data_plane"] = DataPlaneName(plane);
  for (int r = 0; r < world; ++r) {
    metadata[absl::StrCat("fedgather.rank.", r)] = group->identities()[r];
  }
  FG_RETURN_IF_ERROR(
      WriteSafetensorsFile(options.output, result->tensors, metadata));
  if (options.quiet) return absl::OkStatus();
  std::printf(
      "%s\n",
      absl::StrFormat("joined group '%s' as rank %d of %d (epoch %d); %s: %d "
                      "tensor(s), %.1f MiB, in %.3f s, on the %s plane (%s); "
                      "wrote %s",
                      group->name(), group->rank(), world, group->epoch(),
                      options.op, result->tensors.size(),
                      result->bytes / 1048576.0, absl::ToDoubleSeconds(took),
                      DataPlaneName(plane), plane_reason, options.output)
          .c_str());
  return absl::OkStatus();
}

}  // namespace fedgather::cli
