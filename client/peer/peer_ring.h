// PeerRing: the peer links a member uses on the direct data plane
// (docs/protocol.md, "Peer links"): for every k with 2^k < N, the link it
// dials to rank + 2^k and the one it admits from rank − 2^k (mod N). The
// k = 0 pair is the ring (to rank+1, from rank−1), which the ring
// algorithms use; the log-step algorithms for small parts
// (client/peer/bruck_all_gather.h) use them all. ConnectPeerRing makes them
// when an epoch forms on the direct plane.
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

// The number of log steps of an op among `world` members: the k with
// 2^k < world (0 when world = 1).
int LogSteps(int world);

struct PeerRing {
  int rank = 0;
  std::vector<std::string> identities;  // every member's, in rank order
  // to[k]: the link to rank + 2^k; from[k]: the link from rank − 2^k;
  // LogSteps(N) of each, none when N = 1.
  std::vector<std::unique_ptr<PeerLink>> to;
  std::vector<std::unique_ptr<PeerLink>> from;

  // The ring's links (null when N = 1).
  PeerLink* to_next() const { return to.empty() ? nullptr : to[0].get(); }
  PeerLink* from_prev() const { return from.empty() ? nullptr : from[0].get(); }
  // The links as plain pointers, by k.
  std::vector<PeerLink*> to_links() const;
  std::vector<PeerLink*> from_links() const;
  // What every link moved so far (PeerLink::bytes_sent, bytes_received).
  int64_t bytes_sent() const;
  int64_t bytes_received() const;
  // Abort breaks every link (PeerLink::Abort); any thread.
  void Abort() const;
};

// ConnectPeerRing dials every rank + 2^k at its endpoint (its member must
// be identities[rank + 2^k]) while it takes every rank − 2^k's link from
// `offer`'s listener (opened for this epoch), all by `deadline`. The first
// error in the order dials (by k), then takes (by k), naming the link:
// DialPeerLink's and PeerListener::Take's. N = 1 needs no link.
absl::StatusOr<PeerRing> ConnectPeerRing(
    const PeerOffer& offer, const std::string& group, uint64_t epoch, int rank,
    const std::vector<std::string>& identities,
    const std::vector<std::string>& endpoints, absl::Time deadline);

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_PEER_PEER_RING_H_
