// BruckAllGather: all_gather in ⌈log2 N⌉ steps over the links of a
// PeerRing (docs/protocol.md, "Peer links: small parts"), the algorithm of
// Bruck et al. (IEEE TPDS 8(11), 1997) with the ring's direction: at step
// k, rank r sends to rank r+2^k the parts it holds, r, r−1, …, r−c+1
// (mod N, c = min(2^k, N−2^k)), and receives from rank r−2^k the parts
// r−2^k, …, r−2^k−c+1. After the last step every rank holds every part.
// Each link carries as many bytes as in RingAllGather ((N−1)·S in all for
// equal parts of S), but the op takes ⌈log2 N⌉ exchanges where the ring
// takes N−1, and a part is not passed on before it has arrived whole: the
// direct plane uses it for small parts only (client/peer/op_algorithm.h).
//
// Chunks are framed as client/peer/ring_chunks.h says, a chunk's part being
// its rank's; each part goes in chunks of `chunk_bytes` (the last shorter,
// none for an empty part), so a broadcast is the all_gather in which only
// the root's part is not empty: a binomial tree from the root.
//
// The part of rank r − d (d = 1 … N−1) arrives at step ⌊log2 d⌋, on
// from[⌊log2 d⌋] (BruckArrivalStep).
//
// Threads, failures: as RingAllGather's (client/peer/ring_all_gather.h),
// every link of `to` and `from` being the op's.
#ifndef FEDGATHER_CLIENT_PEER_BRUCK_ALL_GATHER_H_
#define FEDGATHER_CLIENT_PEER_BRUCK_ALL_GATHER_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/peer/peer_link.h"
#include "client/peer/ring_chunks.h"

namespace fedgather {

// BruckArrivalStep: the step at which the part of the rank `distance`
// (1 … N−1) before this one arrives: ⌊log2 distance⌋.
int BruckArrivalStep(int distance);

// BruckAllGather: this member is `rank` of `part_sizes.size()`; `mine`
// holds its part (it may be `out`'s own place); `out` receives every part
// in rank order, back to back. to[k] and from[k] are the links to
// rank + 2^k and from rank − 2^k, for every k with 2^k < N (PeerRing's).
absl::Status BruckAllGather(int rank, absl::Span<const size_t> part_sizes,
                            const char* mine, char* out,
                            absl::Span<PeerLink* const> to,
                            absl::Span<PeerLink* const> from,
                            const RingOptions& options);

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_PEER_BRUCK_ALL_GATHER_H_
