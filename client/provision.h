// Provisioning: the CA, server and participant certificates and the starter
// access policy of a federation, as `fedgather provision` writes them.
#ifndef FEDGATHER_CLIENT_PROVISION_H_
#define FEDGATHER_CLIENT_PROVISION_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace fedgather {

struct ProvisionOptions {
  // Output directory; created (with missing parents) when absent.
  std::string out_dir;
  // DNS names and IP addresses the server is dialled by, e.g. {"localhost",
  // "127.0.0.1"}; IP literals become IP SANs, the others DNS SANs; the first
  // is the CN (at most 64 characters). Names hold only A-Z a-z 0-9 . _ - *.
  std::vector<std::string> server_names;
  // Participant names, e.g. {"site-1", "site-2"}: [A-Za-z0-9._-]{1,64},
  // unique across participants, observers and admins, and none of ".",
  // "..", "server", "ca.pem", "ca-key.pem", "policy.yaml".
  std::vector<std::string> participants;
  // Observers (status only) and admins (status, abort rounds, reload the
  // policy) of the group, named by the same rule; they get certificates too.
  std::vector<std::string> observers;
  std::vector<std::string> admins;
  // The group policy.yaml declares, with the same character rule.
  std::string group = "demo";
  // Validity of the CA and of every certificate it issues here.
  absl::Duration validity = absl::Hours(24 * 365);
};

// Provision writes, under DIR = options.out_dir:
//   DIR/ca.pem, DIR/ca-key.pem             the CA (CN "fedgather CA")
//   DIR/server/{cert.pem,key.pem,ca.pem}   serverAuth and clientAuth (for
//                                          probes), SANs server_names
//   DIR/<name>/{cert.pem,key.pem,ca.pem}   per participant, observer and
//                                          admin: CN <name>, SAN URI
//                                          ParticipantIdentity(name),
//                                          clientAuth
//   DIR/policy.yaml                        the access policy
//                                          (server/access/access_policy.h):
//                                          group `group` with world_size =
//                                          number of participants and every
//                                          name in its role; the admins are
//                                          also server admins; the default
//                                          limits written out
// Existing files are replaced (each via a temporary file and a rename).
// Every key file is created mode 0600 and forced to it, other files 0644;
// directories Provision creates are 0755. Leaf certificates never outlive
// the CA. All options are checked before anything is written; a later I/O
// error leaves whatever was already written.
// INVALID_ARGUMENT for an empty out_dir or list, a bad or repeated name, or
// a validity that is not positive; for I/O errors a status whose code
// follows errno (see ErrnoToStatus) and whose message names the path;
// INTERNAL from certificate issuing. Blocks on file I/O and key generation.
absl::Status Provision(const ProvisionOptions& options);

// ParticipantIdentity returns "spiffe://fedgather/" + name, the identity a
// participant's certificate carries and policy.yaml lists.
std::string ParticipantIdentity(absl::string_view name);

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_PROVISION_H_
