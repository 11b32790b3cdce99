// OpAlgorithm: which algorithm a direct round's bytes take over the peer
// links (docs/protocol.md, "Peer links: small parts"). Every rank of the
// round decides from what every rank knows before the bytes move (the op
// and every part's size, from the headers), so all decide alike; the
// thresholds are part of the protocol.
//   - kRing: RingAllGather / RingAllReduce, pipelined in chunks, N−1 (or
//     2·(N−1)) steps; bandwidth-optimal for large parts.
//   - kLogSteps: BruckAllGather / GatherAllReduce, ⌈log2 N⌉ exchanges of
//     whole parts; for parts so small that the ring's steps, not the
//     bytes, set its time. The thresholds were measured (bench/RESULTS.md,
//     "Small parts").
#ifndef FEDGATHER_CLIENT_PEER_OP_ALGORITHM_H_
#define FEDGATHER_CLIENT_PEER_OP_ALGORITHM_H_

#include <cstddef>

#include "absl/types/span.h"
#include "fedgather/v1/fedgather.pb.h"

namespace fedgather {

enum class OpAlgorithm { kRing, kLogSteps };

// The largest part, of the all_gather family or a broadcast's root, that
// goes in log steps.
inline constexpr size_t kLogStepMaxPartBytes = size_t{32} << 10;
// The largest all_reduce contribution that goes in log steps.
inline constexpr size_t kLogStepMaxReduceBytes = size_t{16} << 10;

// ChooseOpAlgorithm: `part_sizes` holds every rank's part in bytes (a
// broadcast's non-roots' 0; an all_reduce's contribution, the same for
// every rank).
OpAlgorithm ChooseOpAlgorithm(v1::Op op, absl::Span<const size_t> part_sizes);

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_PEER_OP_ALGORITHM_H_
