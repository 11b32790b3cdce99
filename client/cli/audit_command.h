// `fedgather audit verify FILE... [--cert SERVER_CERT_PEM]
// [--allow-unsigned-tail]`: check that audit files written by the server
// form one intact, signed chain (see common/audit_chain.h).
#ifndef FEDGATHER_CLIENT_CLI_AUDIT_COMMAND_H_
#define FEDGATHER_CLIENT_CLI_AUDIT_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace fedgather::cli {

struct AuditVerifyCommandOptions {
  // One chain in order: rotated files oldest first, then the active file.
  std::vector<std::string> files;
  std::string cert_path;  // server certificate PEM; empty: no signature check
  bool allow_unsigned_tail = false;
};

// AddAuditCommand adds `audit` with its `verify` subcommand to `app`, parsing
// into `*options` (which must outlive the parse), and returns the `verify`
// subcommand so the caller can test whether it ran.
CLI::App* AddAuditCommand(CLI::App* app, AuditVerifyCommandOptions* options);

// RunAuditVerify verifies the files and, on success, prints a one-line
// summary to `out`, e.g. "audit chain intact: 1234 records (seq 0..1233),
// 2 signed anchors, signed to the end". Returns VerifyAuditFiles' error
// (DATA_LOSS naming the record for tampering), or the error reading the
// certificate. Blocks on file I/O.
absl::Status RunAuditVerify(const AuditVerifyCommandOptions& options,
                            std::ostream& out);

}  // namespace fedgather::cli

#endif  // FEDGATHER_CLIENT_CLI_AUDIT_COMMAND_H_
