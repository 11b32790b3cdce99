// RingAllReduce: all_reduce over a ring of peer links (docs/protocol.md,
// "Peer links"): a reduce-scatter, then an all_gather of the reduced
// segments (RingAllGather), each pipelined in chunks. Each link carries
// about 2·(N−1)/N of the contribution (the reduce-scatter's share in
// accumulators, which for F16, BF16 and the integers are wider than the
// elements).
//
// The contribution's elements, every tensor's in fingerprint order, are
// cut into N segments of (nearly) equal element counts: segment s holds
// elements [⌊E·s/N⌋, ⌊E·(s+1)/N⌋) of the E in all. Segment s is reduced
// in a fixed order: rank s+1 folds its elements into fresh accumulators
// and sends them on, each next rank (s+2, …, mod N) folds its own in and
// sends them on, and rank s folds last, converts them to the tensors'
// dtypes (dividing for MEAN and WEIGHTED_MEAN) and owns the segment. The
// arithmetic is the relay's (common/element_reduction.h); only the order
// of folding differs, so floating sums may differ from the relay's in the
// last bits, while integer, MIN and MAX results are the same.
//
// On a link, chunks are framed as client/peer/ring_chunks.h says, a
// chunk's part being its segment's number. In the reduce-scatter a chunk
// holds the accumulators of one run of one tensor's elements of a
// segment, at most `chunk_bytes` of them (at least one element); rank r
// sends segment r−1 first, then segments r−2, …, r+1 as it has folded
// into them. The all_gather then sends the reduced segments' bytes, as
// RingAllGather does with segment s as rank s's part.
//
// Threads, failures: as RingAllGather's.
#ifndef FEDGATHER_CLIENT_PEER_RING_ALL_REDUCE_H_
#define FEDGATHER_CLIENT_PEER_RING_ALL_REDUCE_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/peer/peer_link.h"
#include "client/peer/ring_chunks.h"
#include "common/fingerprint.h"
#include "fedgather/v1/fedgather.pb.h"

namespace fedgather {

// RingAllReduce: this member is `rank` of `weights.size()`; every rank
// passes the same `tensors` (a reducible fingerprint, CheckReducible),
// `reduce` and `weights` (every rank's WEIGHTED_MEAN weight, by rank; any
// values for other ops). `mine` holds this rank's contribution, the
// tensors' bytes back to back; `out` receives the result in the same
// layout (it must not overlap `mine`). `to_next`/`from_prev` as
// RingAllGather's. `accumulators` is the reduce-scatter's buffer, grown
// as needed: a caller that keeps it between calls keeps its pages mapped
// (faulting 64 MiB of fresh pages in per call made a 64 MiB all_reduce
// twice as slow on this project's VM).
absl::Status RingAllReduce(int rank, const Fingerprint& tensors,
                           v1::ReduceOp reduce,
                           absl::Span<const double> weights, const char* mine,
                           char* out, PeerLink* to_next, PeerLink* from_prev,
                           const RingOptions& options,
                           std::vector<char>* accumulators);

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_PEER_RING_ALL_REDUCE_H_
