#include "client/cli/audit_command.h"

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "common/audit_chain.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace fedgather::cli {

CLI::App* AddAuditCommand(CLI::App* app, AuditVerifyCommandOptions* options) {
  CLI::App* audit = app->add_subcommand("audit", "work with audit logs");
  audit->require_subcommand(1);
  CLI::App* verify = audit->add_subcommand(
      "verify",
      "check that audit files form one intact chain (give rotated files "
      "oldest first, then the active file)");
  verify->add_option("files", options->files, "audit files, oldest first")
      ->required();
  verify->add_option("--cert", options->cert_path,
                     "server certificate PEM: check every anchor signature "
                     "and that the chain is signed to the end");
  verify->add_flag("--allow-unsigned-tail", options->allow_unsigned_tail,
                   "with --cert, accept records after the last anchor");
  return verify;
}

absl::Status RunAuditVerify(const AuditVerifyCommandOptions& options,
                            std::ostream& out) {
  AuditVerifyOptions verify;
  verify.allow_unsigned_tail = options.allow_unsigned_tail;
  if (!options.cert_path.empty()) {
    FG_ASSIGN_OR_RETURN(verify.server_cert_pem,
                        ReadFileToString(options.cert_path));
  }
  FG_ASSIGN_OR_RETURN(const AuditVerifyReport report,
                      VerifyAuditFiles(options.files, verify));
  std::string signatures;
  if (options.cert_path.empty()) {
    signatures = absl::StrCat(report.anchors,
                              " anchors (signatures not checked: no --cert)");
  } else {
    signatures = absl::StrCat(report.anchors, " signed anchor",
                              report.anchors == 1 ? "" : "s",
                              report.signed_to_end ? ", signed to the end"
                                                   : ", unsigned tail allowed");
  }
  out << "audit chain intact: " << report.records << " records (seq "
      << report.first_seq << ".." << report.last_seq << "), " << signatures
      << (report.first_seq > 0
              ? "; the chain starts after seq 0 (older files not given)"
              : "")
      << std::endl;
  for (const std::string& cut : report.cut_tails) {
    out << "cut-off tail, recorded by the server at its next start: " << cut
        << std::endl;
  }
  return absl::OkStatus();
}

}  // namespace fedgather::cli
