// `fedgather join`: contribute every tensor of a safetensors file to one
// all_gather and write the gathered result.
#ifndef FEDGATHER_CLIENT_CLI_JOIN_COMMAND_H_
#define FEDGATHER_CLIENT_CLI_JOIN_COMMAND_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace fedgather::cli {

struct JoinCommandOptions {
  Clock* clock = SystemClock();  // the client's and the report's time source
  std::string server;            // HOST:PORT
  std::string tls_dir;           // cert.pem, key.pem, ca.pem
  // Benchmarks only: no TLS; the server trusts the identity cert.pem names
  // (TlsFiles::insecure_plaintext_for_benchmarks).
  bool insecure_plaintext_for_benchmarks = false;
  std::string group;
  int world_size = 0;
  std::optional<int> rank;
  // all_gather, all_gather_v, all_gather_bytes, all_reduce or broadcast.
  std::string op = "all_gather";
  int root = 0;  // broadcast: the rank whose tensors every rank gets
  // all_reduce: sum, mean, min, max or weighted_mean, and this rank's weight
  // (its example count) for weighted_mean.
  std::string reduce = "sum";
  double weight = 1;
  // all_gather only: this node has `gpus` local GPUs (global rank =
  // rank * gpus + g); each input tensor is [gpus, *shape], slice g for GPU
  // g. The hierarchical all_gather (client/nccl) hands the result to every
  // GPU, checks each GPU's copy against the host's and writes the host's,
  // [N * gpus, *shape]. Needs the NCCL module (client/nccl/nccl_module.h),
  // loaded from `nccl_module` (empty: NcclModulePath(), next to the
  // executable or $FEDGATHER_NCCL_MODULE) only then, and that many CUDA
  // devices; `emulate_gpus` runs the same path on host memory
  // (CpuLocalCollective) and loads nothing.
  int gpus = 0;
  bool emulate_gpus = false;
  std::string nccl_module;
  std::string input;   // safetensors; for all_gather_bytes any file
  std::string output;  // safetensors, see RunJoin
  absl::Duration timeout = absl::Minutes(5);
  // The direct data plane: JoinOptions::peer_listen and peer_advertise.
  std::string peer_listen;
  std::string peer_advertise;
  // No progress report and no summary line; errors are still printed.
  bool quiet = false;
};

// RunJoin joins the group, runs one collective of `op` and writes the
// output file:
//   all_gather        each input name stacked [N, *shape]
//   all_gather_v      each input name concatenated along dim 0 in rank
//                     order, exact-size; metadata "fedgather.split.NAME"
//                     lists each rank's first dimension ("3,5,2")
//   all_gather_bytes  the input file's bytes from every rank, as U8 tensors
//                     "bytes.R"
//   all_reduce        the reduction under each input name and shape
//   broadcast         the root's tensors under each input name and shape
// With `gpus`, all_gather writes [N * gpus, *shape] and metadata
// "fedgather.gpus". Its metadata maps "fedgather.rank.R" to the identity of
// rank R (a node, with `gpus`). Prints a
// one-line summary to stdout. Blocks.
absl::Status RunJoin(const JoinCommandOptions& options);

}  // namespace fedgather::cli

#endif  // FEDGATHER_CLIENT_CLI_JOIN_COMMAND_H_
