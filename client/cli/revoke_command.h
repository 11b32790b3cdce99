// `fedgather revoke`: add certificates to the federation's certificate
// revocation list (CRL), signed by the CA that `fedgather provision` made.
#ifndef FEDGATHER_CLIENT_CLI_REVOKE_COMMAND_H_
#define FEDGATHER_CLIENT_CLI_REVOKE_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"

namespace CLI {
class App;
}  // namespace CLI

namespace fedgather::cli {

struct RevokeCommandOptions {
  // Dates the CRL (thisUpdate; nextUpdate is `days` later).
  Clock* clock = SystemClock();
  // Holds ca.pem and ca-key.pem, the layout `fedgather provision` writes.
  std::string ca_dir;
  // The PEM CRL to update; created when absent.
  std::string crl_path;
  // PEM certificates to revoke, each issued by the CA. May be empty: the CRL
  // is then only re-signed with a new nextUpdate.
  std::vector<std::string> cert_paths;
  // nextUpdate is this many days after now; must be positive.
  int days = 30;
};

// AddRevokeCommand adds `revoke` to `app`, parsing into `*options` (which
// must outlive the parse), and returns the subcommand. --days outside 1..3650
// is a usage error.
CLI::App* AddRevokeCommand(CLI::App* app, RevokeCommandOptions* options);

// RunRevoke reads the CA, the existing CRL at `crl_path` when there is one
// (its entries are kept), adds the serials of `cert_paths`, and replaces
// `crl_path` atomically (temporary file and rename) with mode 0644. Prints a
// line per certificate (revoked, or already listed) and a summary to `out`.
// Nothing is written unless every input is usable.
// INVALID_ARGUMENT for a non-positive `days`, a certificate that does
// not parse or was not issued by the CA, or an existing CRL that does not
// parse or was not signed by it; for I/O errors a status whose code follows
// errno and whose message names the path. Blocks on file I/O.
absl::Status RunRevoke(const RevokeCommandOptions& options, std::ostream& out);

}  // namespace fedgather::cli

#endif  // FEDGATHER_CLIENT_CLI_REVOKE_COMMAND_H_
