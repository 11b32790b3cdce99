#include "client/provision.h"

#include <arpa/inet.h>
#include <sys/stat.h>

#include <cerrno>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/cert_issuer.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace fedgather {
namespace {

bool IsIpAddress(const std::string& name) {
  unsigned char buffer[16];
  return inet_pton(AF_INET, name.c_str(), buffer) == 1 ||
         inet_pton(AF_INET6, name.c_str(), buffer) == 1;
}

absl::Status ValidName(absl::string_view name) {
  if (name.empty() || name == "." || name == ".." || name == "server") {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' cannot name a participant"));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '-') {
      return absl::InvalidArgumentError(absl::StrCat(
          "participant name '", name, "' may hold only A-Z a-z 0-9 . _ -"));
    }
  }
  return absl::OkStatus();
}

absl::Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoToStatus(errno, absl::StrCat("mkdir ", path));
  }
  return absl::OkStatus();
}

absl::Status WriteIdentity(const std::string& dir, const KeyAndCert& pair,
                           const std::string& ca_pem) {
  FG_RETURN_IF_ERROR(MakeDir(dir));
  FG_RETURN_IF_ERROR(WriteStringToFile(dir + "/key.pem", pair.key_pem, 0600));
  FG_RETURN_IF_ERROR(WriteStringToFile(dir + "/cert.pem", pair.cert_pem));
  return WriteStringToFile(dir + "/ca.pem", ca_pem);
}

}  // namespace

std::string ParticipantIdentity(absl::string_view name) {
  return absl::StrCat("spiffe://fedgather/", name);
}

absl::Status Provision(const ProvisionOptions& options) {
  if (options.out_dir.empty()) {
    return absl::InvalidArgumentError("no output directory given");
  }
  if (options.server_names.empty()) {
    return absl::InvalidArgumentError("no server names given");
  }
  if (options.participants.empty()) {
    return absl::InvalidArgumentError("no participants given");
  }
  std::set<std::string> seen;
  for (const std::string& name : options.participants) {
    FG_RETURN_IF_ERROR(ValidName(name));
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("participant '", name, "' is listed twice"));
    }
  }
  FG_RETURN_IF_ERROR(ValidName(options.group));
  FG_RETURN_IF_ERROR(MakeDir(options.out_dir));
  const std::string& dir = options.out_dir;
  FG_ASSIGN_OR_RETURN(
      const KeyAndCert ca,
      CreateCertificateAuthority("fedgather CA", options.validity));
  FG_RETURN_IF_ERROR(WriteStringToFile(dir + "/ca-key.pem", ca.key_pem, 0600));
  FG_RETURN_IF_ERROR(WriteStringToFile(dir + "/ca.pem", ca.cert_pem));

  const absl::Time now = absl::Now();
  CertificateSpec server;
  server.common_name = options.server_names.front();
  for (const std::string& name : options.server_names) {
    (IsIpAddress(name) ? server.ip_addresses : server.dns_names)
        .push_back(name);
  }
  server.server_auth = true;
  server.not_after = now + options.validity;
  FG_ASSIGN_OR_RETURN(const KeyAndCert server_pair,
                      IssueCertificate(ca, server));
  FG_RETURN_IF_ERROR(WriteIdentity(dir + "/server", server_pair, ca.cert_pem));

  std::string groups = absl::StrCat(
      "# fedgather groups file, written by `fedgather provision`.\n"
      "groups:\n  - name: ",
      options.group, "\n    world_size: ", options.participants.size(),
      "\n    members:\n");
  for (const std::string& name : options.participants) {
    CertificateSpec participant;
    participant.common_name = name;
    participant.uris = {ParticipantIdentity(name)};
    participant.client_auth = true;
    participant.not_after = now + options.validity;
    FG_ASSIGN_OR_RETURN(const KeyAndCert pair,
                        IssueCertificate(ca, participant));
    FG_RETURN_IF_ERROR(WriteIdentity(dir + "/" + name, pair, ca.cert_pem));
    absl::StrAppend(&groups, "      - ", ParticipantIdentity(name), "\n");
  }
  return WriteStringToFile(dir + "/groups.yaml", groups);
}

}  // namespace fedgather
