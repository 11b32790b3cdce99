#include "client/cli/join_command.h"

#include <cstdio>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "common/safetensors.h"
#include "common/status_macros.h"
#include "common/tls_credentials.h"

namespace fedgather::cli {

absl::Status RunJoin(const JoinCommandOptions& options) {
  FG_ASSIGN_OR_RETURN(const SafetensorsFile input,
                      SafetensorsFile::ReadFile(options.input));
  const std::vector<ConstHostTensor> inputs = input.Views();
  if (inputs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.input, " holds no tensors; nothing to contribute"));
  }
  ClientOptions client_options;
  client_options.server_address = options.server;
  FG_ASSIGN_OR_RETURN(client_options.tls, ReadTlsDir(options.tls_dir));
  FG_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                      Client::Connect(client_options));
  JoinOptions join;
  join.group = options.group;
  join.world_size = options.world_size;
  join.rank = options.rank;
  join.timeout = options.timeout;
  FG_ASSIGN_OR_RETURN(std::unique_ptr<Group> group, client->Join(join));

  const int world = group->world_size();
  std::vector<std::unique_ptr<uint8_t[]>> memory;
  std::vector<MutableHostTensor> outputs;
  int64_t total_bytes = 0;
  for (const ConstHostTensor& in : inputs) {
    FG_ASSIGN_OR_RETURN(const int64_t bytes, ByteSize(in.spec));
    MutableHostTensor out;
    out.spec = in.spec;
    out.spec.shape.insert(out.spec.shape.begin(), world);
    memory.emplace_back(new uint8_t[std::max<int64_t>(1, bytes * world)]);
    out.data = memory.back().get();
    outputs.push_back(std::move(out));
    total_bytes += bytes * world;
  }
  CollectiveOptions collective;
  collective.timeout = options.timeout;
  const absl::Time start = absl::Now();
  FG_RETURN_IF_ERROR(group->AllGatherInto(inputs, outputs, collective));
  const absl::Duration took = absl::Now() - start;

  std::map<std::string, std::string> metadata = {
      {"fedgather.group", group->name()},
      {"fedgather.epoch", absl::StrCat(group->epoch())},
      {"fedgather.world_size", absl::StrCat(world)},
  };
  for (int r = 0; r < world; ++r) {
    metadata[absl::StrCat("fedgather.rank.", r)] = group->identities()[r];
  }
  std::vector<ConstHostTensor> written;
  for (const MutableHostTensor& out : outputs) {
    written.push_back(ConstHostTensor{out.spec, out.data});
  }
  FG_RETURN_IF_ERROR(WriteSafetensorsFile(options.output, written, metadata));
  std::printf(
      "%s\n",
      absl::StrFormat(
          "joined group '%s' as rank %d of %d (epoch %d); gathered %d "
          "tensor(s), %.1f MiB, in %.3f s; wrote %s",
          group->name(), group->rank(), world, group->epoch(), inputs.size(),
          total_bytes / 1048576.0, absl::ToDoubleSeconds(took), options.output)
          .c_str());
  return absl::OkStatus();
}

}  // namespace fedgather::cli
