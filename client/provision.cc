#include "client/provision.h"

#include <arpa/inet.h>
#include <sys/stat.h>

#include <cerrno>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cert_issuer.h"
#include "common/clock.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace fedgather {
namespace {

constexpr int kKeyMode = 0600;
constexpr mode_t kDirMode = 0755;
// Participant names and the first server name become a CN, which X.509
// limits to 64 characters.
constexpr size_t kMaxCommonName = 64;

bool IsIpAddress(const std::string& name) {
  unsigned char buffer[16];
  return inet_pton(AF_INET, name.c_str(), buffer) == 1 ||
         inet_pton(AF_INET6, name.c_str(), buffer) == 1;
}

// ValidName checks a participant or group name: [A-Za-z0-9._-]+, and not a
// name that would collide with a path Provision writes.
absl::Status ValidName(absl::string_view what, absl::string_view name) {
  static constexpr absl::string_view kReserved[] = {
      ".", "..", "server", "ca.pem", "ca-key.pem", "policy.yaml"};
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("empty ", what, " name"));
  }
  if (name.size() > kMaxCommonName) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " name '", name, "' is longer than ", kMaxCommonName));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '-') {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " name '", name, "' may hold only A-Z a-z 0-9 . _ -"));
    }
  }
  for (absl::string_view reserved : kReserved) {
    if (name == reserved) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", name, "' cannot name a ", what));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidServerName(const std::string& name) {
  if (IsIpAddress(name)) return absl::OkStatus();
  if (name.empty()) return absl::InvalidArgumentError("empty server name");
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '-' && c != '*') {
      return absl::InvalidArgumentError(absl::StrCat(
          "server name '", name,
          "' is neither an IP address nor a DNS name (A-Z a-z 0-9 . _ - *)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckOptions(const ProvisionOptions& options) {
  if (options.out_dir.empty()) {
    return absl::InvalidArgumentError("no output directory given");
  }
  if (options.server_names.empty()) {
    return absl::InvalidArgumentError("no server names given");
  }
  for (const std::string& name : options.server_names) {
    FG_RETURN_IF_ERROR(ValidServerName(name));
  }
  if (options.server_names.front().size() > kMaxCommonName) {
    return absl::InvalidArgumentError(
        absl::StrCat("the first server name, '", options.server_names.front(),
                     "', becomes the CN and may not exceed ", kMaxCommonName,
                     " characters"));
  }
  if (options.participants.empty()) {
    return absl::InvalidArgumentError("no participants given");
  }
  std::set<std::string> seen;
  for (const auto& [what, names] :
       {std::make_pair("participant", &options.participants),
        std::make_pair("observer", &options.observers),
        std::make_pair("admin", &options.admins)}) {
    for (const std::string& name : *names) {
      FG_RETURN_IF_ERROR(ValidName(what, name));
      if (!seen.insert(name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", name, "' is listed twice"));
      }
    }
  }
  FG_RETURN_IF_ERROR(ValidName("group", options.group));
  if (options.validity <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("validity ", absl::FormatDuration(options.validity),
                     " is not positive"));
  }
  return absl::OkStatus();
}

absl::Status WriteIdentity(const std::string& dir, const KeyAndCert& pair,
                           const std::string& ca_pem) {
  FG_RETURN_IF_ERROR(MakeDirectory(dir, kDirMode));
  FG_RETURN_IF_ERROR(
      WriteStringToFile(dir + "/key.pem", pair.key_pem, kKeyMode));
  FG_RETURN_IF_ERROR(WriteStringToFile(dir + "/cert.pem", pair.cert_pem));
  return WriteStringToFile(dir + "/ca.pem", ca_pem);
}

// PolicyYaml is the starter access policy. Names are [A-Za-z0-9._-], so
// they need no escaping; the group name is quoted so that YAML reads a name
// like "null" or "1" as a string.
std::string PolicyYaml(const ProvisionOptions& options) {
  std::string yaml = absl::StrCat(
      "# fedgather access policy, written by `fedgather provision`.\n"
      "# Format: docs/security.md. Reload a changed policy with SIGHUP or\n"
      "# `fedgather policy reload` (a server admin).\n"
      "version: 1\n");
  if (!options.admins.empty()) {
    absl::StrAppend(&yaml, "server_admins:\n");
    for (const std::string& name : options.admins) {
      absl::StrAppend(&yaml, "  - ", ParticipantIdentity(name), "\n");
    }
  }
  absl::StrAppend(
      &yaml,
      "# Per-identity limits (these are the defaults). Override them for one\n"
      "# identity under identity_limits: {IDENTITY: {max_groups: 2}}.\n"
      "limits:\n"
      "  max_contribution_bytes: 8GiB\n"
      "  max_tensors_per_contribution: 4096\n"
      "  max_concurrent_streams: 32\n"
      "  max_groups: 8\n"
      "groups:\n"
      "  - name: \"",
      options.group, "\"\n    world_size: ", options.participants.size(),
      "\n    members:\n");
  for (const auto& [role, names] :
       {std::make_pair("participant", &options.participants),
        std::make_pair("observer", &options.observers),
        std::make_pair("admin", &options.admins)}) {
    for (const std::string& name : *names) {
      absl::StrAppend(&yaml, "      ", ParticipantIdentity(name), ": ", role,
                      "\n");
    }
  }
  return yaml;
}

}  // namespace

std::string ParticipantIdentity(absl::string_view name) {
  return absl::StrCat("spiffe://fedgather/", name);
}

absl::Status Provision(const ProvisionOptions& options) {
  FG_RETURN_IF_ERROR(CheckOptions(options));
  const std::string policy_yaml = PolicyYaml(options);
  const std::string& dir = options.out_dir;
  FG_RETURN_IF_ERROR(MakeDirectories(dir, kDirMode));

  // Taken before the CA is made, so that every leaf expires no later than
  // the CA, whose own clock reading comes after this one. That reading is
  // the real clock's (common/cert_issuer.cc), so this one must be too.
  const absl::Time not_after = SystemClock()->Now() + options.validity;
  FG_ASSIGN_OR_RETURN(
      const KeyAndCert ca,
      CreateCertificateAuthority("fedgather CA", options.validity));
  FG_RETURN_IF_ERROR(
      WriteStringToFile(dir + "/ca-key.pem", ca.key_pem, kKeyMode));
  FG_RETURN_IF_ERROR(WriteStringToFile(dir + "/ca.pem", ca.cert_pem));

  CertificateSpec server;
  server.common_name = options.server_names.front();
  for (const std::string& name : options.server_names) {
    (IsIpAddress(name) ? server.ip_addresses : server.dns_names)
        .push_back(name);
  }
  server.server_auth = true;
  // Also clientAuth: the server's handshake admits only client-auth
  // certificates, and probes in the server's container (`fedgather health
  // --tls-dir <server dir>`) present this one. The policy gives its identity
  // no role unless an operator names it.
  server.client_auth = true;
  server.not_after = not_after;
  FG_ASSIGN_OR_RETURN(const KeyAndCert server_pair,
                      IssueCertificate(ca, server));
  FG_RETURN_IF_ERROR(WriteIdentity(dir + "/server", server_pair, ca.cert_pem));

  for (const std::vector<std::string>* names :
       {&options.participants, &options.observers, &options.admins}) {
    for (const std::string& name : *names) {
      CertificateSpec client;
      client.common_name = name;
      client.uris = {ParticipantIdentity(name)};
      client.client_auth = true;
      client.not_after = not_after;
      FG_ASSIGN_OR_RETURN(const KeyAndCert pair, IssueCertificate(ca, client));
      FG_RETURN_IF_ERROR(WriteIdentity(dir + "/" + name, pair, ca.cert_pem));
    }
  }
  return WriteStringToFile(dir + "/policy.yaml", policy_yaml);
}

}  // namespace fedgather
