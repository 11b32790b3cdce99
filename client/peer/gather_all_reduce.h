// GatherAllReduce: all_reduce of small contributions in ⌈log2 N⌉ steps
// (docs/protocol.md, "Peer links: small parts"): every rank's contribution
// is all_gathered whole (BruckAllGather, each contribution as its rank's
// part), then every rank folds them in rank order 0, 1, …, N−1 with the
// relay's arithmetic (common/element_reduction.h) and converts. Every rank
// therefore computes the same bytes, and can check each contribution
// against its rank's claim before it is used. Each link carries (N−1)·S
// bytes where the ring's reduce-scatter and all_gather carry about
// 2·(N−1)/N·S: the direct plane uses it for small contributions only
// (client/peer/op_algorithm.h).
//
// Threads, failures: BruckAllGather's.
#ifndef FEDGATHER_CLIENT_PEER_GATHER_ALL_REDUCE_H_
#define FEDGATHER_CLIENT_PEER_GATHER_ALL_REDUCE_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/peer/peer_link.h"
#include "client/peer/ring_chunks.h"
#include "common/fingerprint.h"
#include "fedgather/v1/fedgather.pb.h"

namespace fedgather {

// GatherAllReduce: this member is `rank` of `weights.size()`; every rank
// passes the same `tensors` (a reducible fingerprint, CheckReducible),
// `reduce` and `weights` (every rank's WEIGHTED_MEAN weight, by rank; any
// values for other ops). `mine` holds this rank's contribution, the
// tensors' bytes back to back (S bytes); `gathered` receives every rank's,
// in rank order (N·S bytes; the caller checks them against the claims);
// `out` the result, in the contribution's layout. `to`/`from` as
// BruckAllGather's; `accumulators` is scratch, grown as needed.
absl::Status GatherAllReduce(
    int rank, const Fingerprint& tensors, v1::ReduceOp reduce,
    absl::Span<const double> weights, const char* mine, char* gathered,
    char* out, absl::Span<PeerLink* const> to, absl::Span<PeerLink* const> from,
    const RingOptions& options, std::vector<char>* accumulators);

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_PEER_GATHER_ALL_REDUCE_H_
