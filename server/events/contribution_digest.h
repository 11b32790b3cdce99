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
  std::string digest_hex;  // of the contribution's bytes, in the round's
                           // algorithm (ServerEvent::digest_algorithm)
  int64_t bytes = 0;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_EVENTS_CONTRIBUTION_DIGEST_H_
