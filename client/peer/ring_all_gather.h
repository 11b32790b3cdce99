// RingAllGather: all_gather over a ring of peer links, pipelined in chunks
// (docs/protocol.md, "Peer links: the ring"). Rank r sends on its link to
// rank r+1 (mod N) and receives on its link from rank r−1: first its own
// part, then each part it receives, as each chunk arrives, except the part
// of rank r+1, which has then gone round. Each byte crosses each link at
// most once; every link carries (N−1)·S bytes for equal parts of S.
//
// Chunks are framed as client/peer/ring_chunks.h says, a chunk's part being
// its rank's. Parts go in the order above, each in chunks of `chunk_bytes`
// (the last one shorter; none for an empty part), so a broadcast is the
// all_gather in which only the root's part is not empty: a pipelined chain
// from the root.
//
// Both ends must agree on `op` and every part's size before the call; the
// receiver checks each header against what is due and fails with
// DATA_LOSS naming the link otherwise.
//
// Threads: the call sends from a thread of its own and receives on the
// caller's; it returns when both are done. On any failure it aborts both
// links (they are broken for good) and returns the first error.
#ifndef FEDGATHER_CLIENT_PEER_RING_ALL_GATHER_H_
#define FEDGATHER_CLIENT_PEER_RING_ALL_GATHER_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/peer/peer_link.h"
#include "client/peer/ring_chunks.h"

namespace fedgather {

// RingAllGather: this member is `rank` of `part_sizes.size()`; `mine`
// holds its part (part_sizes[rank] bytes; it may be `out`'s own place);
// `out` receives every part in rank order, back to back. `to_next` and
// `from_prev` are the links to rank+1 and from rank−1 (the same member
// when N = 2, but two links); both unused when N = 1.
absl::Status RingAllGather(int rank, absl::Span<const size_t> part_sizes,
                           const char* mine, char* out, PeerLink* to_next,
                           PeerLink* from_prev, const RingOptions& options);

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_PEER_RING_ALL_GATHER_H_
