#include "client/cli/revoke_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cert_issuer.h"
#include "common/file_io.h"
#include "common/peer_identity.h"
#include "common/status_macros.h"

namespace fedgather::cli {
namespace {

// WithContext prefixes `status`'s message with `context`, keeping its code.
absl::Status WithContext(const absl::Status& status,
                         absl::string_view context) {
  return absl::Status(status.code(),
                      absl::StrCat(context, ": ", status.message()));
}

}  // namespace

CLI::App* AddRevokeCommand(CLI::App* app, RevokeCommandOptions* options) {
  CLI::App* revoke = app->add_subcommand(
      "revoke",
      "add certificates to the CRL signed by the provisioned CA (keeps the "
      "CRL's entries; with no certificates, only renews it)");
  revoke
      ->add_option("--ca-dir", options->ca_dir,
                   "directory with ca.pem and ca-key.pem (provision --out)")
      ->required();
  revoke->add_option("--crl", options->crl_path, "CRL PEM file to update")
      ->required();
  revoke
      ->add_option("--days", options->days, "days until the CRL's next update")
      ->check(CLI::Range(1, 3650))
      ->capture_default_str();
  revoke->add_option("certs", options->cert_paths,
                     "certificate PEM files to revoke");
  return revoke;
}

absl::Status RunRevoke(const RevokeCommandOptions& options, std::ostream& out) {
  if (options.days <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--days must be positive, not ", options.days));
  }
  KeyAndCert ca;
  FG_ASSIGN_OR_RETURN(
      ca.cert_pem, ReadFileToString(absl::StrCat(options.ca_dir, "/ca.pem")));
  FG_ASSIGN_OR_RETURN(ca.key_pem, ReadFileToString(absl::StrCat(
                                      options.ca_dir, "/ca-key.pem")));

  std::string existing;
  absl::StatusOr<std::string> read = ReadFileToString(options.crl_path);
  if (read.ok()) {
    existing = *std::move(read);
  } else if (!absl::IsNotFound(read.status())) {
    return read.status();
  }
  std::vector<std::string> listed;
  if (!existing.empty()) {
    absl::StatusOr<std::vector<std::string>> serials = CrlSerialsHex(existing);
    if (!serials.ok()) return WithContext(serials.status(), options.crl_path);
    listed = *std::move(serials);
  }

  std::vector<std::string> cert_pems;
  std::vector<std::string> lines;
  for (const std::string& path : options.cert_paths) {
    FG_ASSIGN_OR_RETURN(std::string pem, ReadFileToString(path));
    absl::StatusOr<std::string> serial = CertificateSerialHex(pem);
    if (!serial.ok()) return WithContext(serial.status(), path);
    absl::StatusOr<std::string> identity = IdentityFromCertificatePem(pem);
    const std::string who =
        identity.ok() ? absl::StrCat("'", *identity, "'") : "(no identity)";
    const bool already =
        std::find(listed.begin(), listed.end(), *serial) != listed.end();
    lines.push_back(absl::StrCat(already ? "already revoked: " : "revoked: ",
                                 who, " serial ", *serial, " (", path, ")"));
    if (!already) listed.push_back(*serial);
    cert_pems.push_back(std::move(pem));
  }

  const absl::Time now = options.clock->Now();
  const absl::Time next_update = now + absl::Hours(24) * options.days;
  absl::StatusOr<std::string> crl =
      IssueCrl(ca, cert_pems, now, next_update, existing);
  if (!crl.ok()) {
    return WithContext(crl.status(),
                       absl::StrCat("updating ", options.crl_path));
  }
  FG_RETURN_IF_ERROR(WriteStringToFile(options.crl_path, *crl, 0644));
  for (const std::string& line : lines) out << line << "\n";
  out << "wrote " << options.crl_path << ": " << listed.size()
      << " revoked serial(s), next update "
      << absl::FormatTime(absl::RFC3339_sec, next_update, absl::UTCTimeZone())
      << std::endl;
  return absl::OkStatus();
}

}  // namespace fedgather::cli
