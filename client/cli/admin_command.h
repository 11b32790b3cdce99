// The commands of the `fedgather` CLI that ask the server about itself, each
// one call with this identity's certificate: of its Admin service
//   fedgather status --server H:P --tls-dir DIR [--group G] [--json]
//   fedgather round abort --server H:P --tls-dir DIR --group G [--reason R]
//   fedgather policy reload --server H:P --tls-dir DIR
// and of its standard health service, for container probes
//   fedgather health --server H:P --tls-dir DIR [--timeout S]
#ifndef FEDGATHER_CLIENT_CLI_ADMIN_COMMAND_H_
#define FEDGATHER_CLIENT_CLI_ADMIN_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace fedgather::cli {

struct AdminCommandOptions {
  std::string server;    // HOST:PORT
  std::string tls_dir;   // cert.pem, key.pem, ca.pem
  std::string group;     // status: empty for every visible group
  std::string reason;    // round abort
  bool json = false;     // status: print the reply as JSON
  double timeout_s = 5;  // health: how long to wait for the answer
};

// The subcommands AddAdminCommands added, to test which one ran.
struct AdminCommands {
  CLI::App* status = nullptr;
  CLI::App* round_abort = nullptr;
  CLI::App* policy_reload = nullptr;
  CLI::App* health = nullptr;
};

// AddAdminCommands adds `status`, `round abort`, `policy reload` and
// `health` to
// `app`, parsing into `*options` (which must outlive the parse).
AdminCommands AddAdminCommands(CLI::App* app, AdminCommandOptions* options);

// RunStatus prints the groups' status to `out`: a table, or JSON with
// options.json. RunRoundAbort and RunPolicyReload print what they did.
// Each returns the server's error. Blocks for one call.
absl::Status RunStatus(const AdminCommandOptions& options, std::ostream& out);
absl::Status RunRoundAbort(const AdminCommandOptions& options,
                           std::ostream& out);
absl::Status RunPolicyReload(const AdminCommandOptions& options,
                             std::ostream& out);
// RunHealth prints "SERVING" and returns OK when the server says it is
// serving; else the reason (NOT_SERVING, no connection, ...).
absl::Status RunHealth(const AdminCommandOptions& options, std::ostream& out);

}  // namespace fedgather::cli

#endif  // FEDGATHER_CLIENT_CLI_ADMIN_COMMAND_H_
