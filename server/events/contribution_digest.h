// ContributionDigest: one rank's contribution to a round as a commit names
// it, for server events and audit records.
#ifndef FEDGATHER_SERVER_EVENTS_CONTRIBUTION_DIGEST_H_
#define FEDGATHER_SERVER_EVENTS_CONTRIBUTION_DIGEST_H_

#include <cstdint>
#include <string>

namespace fedgather::server {

struct ContributionDigest {
  int rank = -1;
  std::string identity;
  std::string sha256_hex;  // SHA-256 of the contribution's bytes
  int64_t bytes = 0;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_EVENTS_CONTRIBUTION_DIGEST_H_
