#include "client/peer/peer_ring.h"

#include <thread>
#include <utility>

#include "client/peer/peer_dial.h"

namespace fedgather {

absl::StatusOr<PeerRing> ConnectPeerRing(
    const PeerOffer& offer, const std::string& group, uint64_t epoch, int rank,
    const std::vector<std::string>& identities,
    const std::vector<std::string>& endpoints, absl::Time deadline) {
  const int world = static_cast<int>(identities.size());
  PeerRing ring;
  ring.rank = rank;
  ring.identities = identities;
  if (world == 1) return ring;
  const int next = (rank + 1) % world;
  const int prev = (rank + world - 1) % world;
  // The dial and the take each wait on another member: run them together,
  // or two members could each wait for the other's dial.
  absl::StatusOr<std::unique_ptr<PeerLink>> dialed;
  std::thread dialer([&] {
    v1::PeerLinkHello hello;
    hello.set_group(group);
    hello.set_epoch(epoch);
    hello.set_from_rank(static_cast<uint32_t>(rank));
    hello.set_to_rank(static_cast<uint32_t>(next));
    dialed = DialPeerLink(*offer.tls(), endpoints[next], hello,
                          identities[next], deadline);
  });
  absl::StatusOr<std::unique_ptr<PeerLink>> taken =
      offer.listener()->Take(group, epoch, prev, deadline);
  dialer.join();
  if (!dialed.ok()) return dialed.status();
  if (!taken.ok()) return taken.status();
  ring.to_next = *std::move(dialed);
  ring.from_prev = *std::move(taken);
  return ring;
}

}  // namespace fedgather
