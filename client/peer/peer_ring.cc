#include "client/peer/peer_ring.h"

#include <thread>
#include <utility>

#include "client/peer/peer_dial.h"

namespace fedgather {
namespace {

std::vector<PeerLink*> Pointers(
    const std::vector<std::unique_ptr<PeerLink>>& links) {
  std::vector<PeerLink*> pointers;
  for (const std::unique_ptr<PeerLink>& link : links) {
    pointers.push_back(link.get());
  }
  return pointers;
}

}  // namespace

int LogSteps(int world) {
  int steps = 0;
  while (steps < 31 && (int64_t{1} << steps) < world) ++steps;
  return steps;
}

std::vector<PeerLink*> PeerRing::to_links() const { return Pointers(to); }
std::vector<PeerLink*> PeerRing::from_links() const { return Pointers(from); }

int64_t PeerRing::bytes_sent() const {
  int64_t sent = 0;
  for (const std::unique_ptr<PeerLink>& link : to) sent += link->bytes_sent();
  return sent;
}

int64_t PeerRing::bytes_received() const {
  int64_t received = 0;
  for (const std::unique_ptr<PeerLink>& link : from) {
    received += link->bytes_received();
  }
  return received;
}

void PeerRing::Abort() const {
  for (const std::unique_ptr<PeerLink>& link : to) link->Abort();
  for (const std::unique_ptr<PeerLink>& link : from) link->Abort();
}

absl::StatusOr<PeerRing> ConnectPeerRing(
    const PeerOffer& offer, const std::string& group, uint64_t epoch, int rank,
    const std::vector<std::string>& identities,
    const std::vector<std::string>& endpoints, absl::Time deadline) {
  const int world = static_cast<int>(identities.size());
  const int steps = LogSteps(world);
  PeerRing ring;
  ring.rank = rank;
  ring.identities = identities;
  // The dials and the takes each wait on another member: run them all at
  // once, or two members could each wait for the other's dial.
  std::vector<absl::StatusOr<std::unique_ptr<PeerLink>>> dialed;
  for (int k = 0; k < steps; ++k) {
    dialed.emplace_back(absl::UnknownError("not dialed"));
  }
  std::vector<std::thread> dialers;
  for (int k = 0; k < steps; ++k) {
    dialers.emplace_back([&, k] {
      const int to = (rank + (1 << k)) % world;
      v1::PeerLinkHello hello;
      hello.set_group(group);
      hello.set_epoch(epoch);
      hello.set_from_rank(static_cast<uint32_t>(rank));
      hello.set_to_rank(static_cast<uint32_t>(to));
      dialed[k] = DialPeerLink(*offer.tls(), endpoints[to], hello,
                               identities[to], deadline);
    });
  }
  std::vector<absl::StatusOr<std::unique_ptr<PeerLink>>> taken;
  for (int k = 0; k < steps; ++k) {
    const int from = ((rank - (1 << k)) % world + world) % world;
    taken.push_back(offer.listener()->Take(group, epoch, from, deadline));
  }
  for (std::thread& dialer : dialers) dialer.join();
  for (int k = 0; k < steps; ++k) {
    if (!dialed[k].ok()) return dialed[k].status();
    ring.to.push_back(*std::move(dialed[k]));
  }
  for (int k = 0; k < steps; ++k) {
    if (!taken[k].ok()) return taken[k].status();
    ring.from.push_back(*std::move(taken[k]));
  }
  return ring;
}

}  // namespace fedgather
