// DirectDataPlane: the direct data plane (client/data_plane.h) of an epoch
// the server formed direct (docs/protocol.md, "Data planes"), for every
// op. The server still takes every rank's header, its end (the digest it
// claims for its part) and its Delivery, and sends the other ranks'
// headers, the claims and the commit; the bytes themselves go round the
// epoch's peer links (PeerRing), never through the server: the all_gather
// family's parts and a broadcast's root's part by RingAllGather (for a
// broadcast, a chain from the root), an all_reduce by RingAllReduce, or,
// for small parts (ChooseOpAlgorithm, client/peer/op_algorithm.h), by
// BruckAllGather and GatherAllReduce in log steps.
//
// Each FrameStream wraps one Collective stream to the server, opened with
// a hold (RelayDataPlane::OpenHeld), and speaks the collective's frames to its
// handler as the relay would, so CollectiveCall needs no second code path:
//   - the handler's chunks stay here: they are this rank's part;
//   - once this rank's end is written and every other rank's header has
//     arrived, the ring runs on a thread of the stream's own;
//   - once the ring is done and the claims have arrived, every part
//     received is hashed and checked against its rank's claim, then handed
//     to the handler as chunk frames (an all_reduce's result as the result
//     chunks, its digest in the Delivery); the Delivery tells the server
//     the outcome (OK, or what failed on which link), and the server's
//     commit (or the round's failure) follows on every rank.
//   - the handler gets the other ranks' headers the relay would send it
//     (a broadcast's root's, none for an all_reduce).
// A stream here is never resumed: its end is always final.
//
// Threads: as data_plane.h says. The ring thread calls the handler's
// OnFrame only after the server's last header and before the commit, so
// the handler never sees two frames at once; OnEnded waits for the ring
// thread.
#ifndef FEDGATHER_CLIENT_DIRECT_DATA_PLANE_H_
#define FEDGATHER_CLIENT_DIRECT_DATA_PLANE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/data_plane.h"
#include "client/peer/peer_ring.h"
#include "client/relay_data_plane.h"

namespace fedgather {

struct DirectPlaneOptions {
  int64_t max_chunk_bytes = int64_t{1} << 20;  // of the frames handed over
  size_t ring_chunk_bytes = size_t{1} << 20;
  // A link that moves nothing for this long fails the round.
  absl::Duration stall_timeout = absl::Seconds(5);
  // Tests only: RingOptions::forward_hook.
  std::function<void(int part, char* data, size_t size)> forward_hook;
};

// The buffers a direct collective works in: this rank's part as the
// handler writes it, and every part the ring brings. They outlive each
// collective and keep their memory for the next, one at a time (a Group
// runs one collective at a time), so repeated collectives of one size
// neither reallocate nor fault their pages in again; the price is holding
// N·S bytes besides the caller's output between collectives.
struct DirectScratch {
  std::string mine;
  std::vector<char> parts;         // or an all_reduce's result
  std::vector<char> gathered;      // a small all_reduce's contributions
  std::vector<char> accumulators;  // an all_reduce's
};

class DirectDataPlane : public DataPlane {
 public:
  // The streams' frames to the server go over `server` (the relay plane's
  // Collective streams); the parts over `ring`. Both must outlive every
  // stream. A ring whose round failed is broken for good (its links were
  // aborted).
  DirectDataPlane(RelayDataPlane* server, PeerRing* ring,
                  DirectPlaneOptions options);

  void set_forward_hook(
      std::function<void(int part, char* data, size_t size)> hook) {
    options_.forward_hook = std::move(hook);
  }

  // Open: `header` must be this rank's CollectiveHeader, declaring the
  // direct plane. One stream at a time:
  // each uses the plane's DirectScratch.
  std::unique_ptr<FrameStream> Open(grpc::ByteBuffer header,
                                    FrameHandler* handler) override;

 private:
  RelayDataPlane* const server_;
  PeerRing* const ring_;
  DirectPlaneOptions options_;
  DirectScratch scratch_;
};

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_DIRECT_DATA_PLANE_H_
