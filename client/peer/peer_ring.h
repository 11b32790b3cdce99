// PeerRing: the two peer links a member uses on the direct data plane's
// ring (docs/protocol.md, "Peer links"): the one it dials to rank+1 and the
// one it admits from rank−1 (mod N). ConnectPeerRing makes them when an
// epoch forms on the direct plane.
#ifndef FEDGATHER_CLIENT_PEER_PEER_RING_H_
#define FEDGATHER_CLIENT_PEER_PEER_RING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/peer/peer_link.h"
#include "client/peer/peer_offer.h"

namespace fedgather {

struct PeerRing {
  int rank = 0;
  std::vector<std::string> identities;  // every member's, in rank order
  std::unique_ptr<PeerLink> to_next;    // to rank+1; null when N = 1
  std::unique_ptr<PeerLink> from_prev;  // from rank−1; null when N = 1
};

// ConnectPeerRing dials rank+1 at endpoints[rank+1] (its member must be
// identities[rank+1]) while it takes rank−1's link from `offer`'s listener
// (opened for this epoch), both by `deadline`. The first error, naming the
// link: DialPeerLink's and PeerListener::Take's. N = 1 needs no link.
absl::StatusOr<PeerRing> ConnectPeerRing(
    const PeerOffer& offer, const std::string& group, uint64_t epoch, int rank,
    const std::vector<std::string>& identities,
    const std::vector<std::string>& endpoints, absl::Time deadline);

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_PEER_PEER_RING_H_
