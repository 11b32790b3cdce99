// Provisioning: the CA, server and participant certificates and the groups
// file of a federation, as `fedgather provision` writes them.
#ifndef FEDGATHER_CLIENT_PROVISION_H_
#define FEDGATHER_CLIENT_PROVISION_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace fedgather {

struct ProvisionOptions {
  std::string out_dir;
  // DNS names and IP addresses the server is dialled by; IP literals become
  // IP SANs, the others DNS SANs; the first is the CN.
  std::vector<std::string> server_names;
  // Participant names, [A-Za-z0-9._-]+, unique.
  std::vector<std::string> participants;
  std::string group = "demo";
  absl::Duration validity = absl::Hours(24 * 365);
};

// Provision writes DIR/ca.pem, DIR/ca-key.pem, DIR/server/{cert,key,ca}.pem,
// DIR/<name>/{cert,key,ca}.pem for every participant (CN <name>, SAN URI
// ParticipantIdentity(name), clientAuth) and DIR/groups.yaml declaring
// `group` with every participant as a member and world size their count.
// Key files are mode 0600. INVALID_ARGUMENT for bad names or empty lists;
// file errors name the path. Blocks.
absl::Status Provision(const ProvisionOptions& options);

// ParticipantIdentity returns "spiffe://fedgather/<name>".
std::string ParticipantIdentity(absl::string_view name);

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_PROVISION_H_
