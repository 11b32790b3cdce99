// `fedgather join`: contribute every tensor of a safetensors file to one
// all_gather and write the gathered result.
#ifndef FEDGATHER_CLIENT_CLI_JOIN_COMMAND_H_
#define FEDGATHER_CLIENT_CLI_JOIN_COMMAND_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace fedgather::cli {

struct JoinCommandOptions {
  std::string server;   // HOST:PORT
  std::string tls_dir;  // cert.pem, key.pem, ca.pem
  std::string group;
  int world_size = 0;
  std::optional<int> rank;
  std::string input;   // safetensors
  std::string output;  // safetensors: each input name stacked [N, *shape]
  absl::Duration timeout = absl::Minutes(5);
};

// RunJoin joins the group, runs one all_gather of the input file's tensors
// and writes the output file, whose metadata maps "fedgather.rank.R" to the
// identity of rank R. Prints a one-line summary to stdout. Blocks.
absl::Status RunJoin(const JoinCommandOptions& options);

}  // namespace fedgather::cli

#endif  // FEDGATHER_CLIENT_CLI_JOIN_COMMAND_H_
