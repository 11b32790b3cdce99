#include "server/relay/attach_request.h"

#include <cstdint>
#include <limits>

namespace fedgather::server {

int64_t UploadBytes(int rank, const v1::CollectiveHeader& header,
                    const Fingerprint& fingerprint) {
  if (header.op() == v1::BROADCAST &&
      header.root() != static_cast<uint32_t>(rank)) {
    return 0;
  }
  return ContributionBytes(fingerprint)
      .value_or(std::numeric_limits<int64_t>::max());
}

}  // namespace fedgather::server
