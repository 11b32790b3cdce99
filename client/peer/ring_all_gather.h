// RingAllGather: all_gather over a ring of peer links, pipelined in chunks
// (docs/protocol.md, "Peer links: the ring"). Rank r sends on its link to
// rank r+1 (mod N) and receives on its link from rank r−1: first its own
// part, then each part it receives, as each chunk arrives, except the part
// of rank r+1, which has then gone round. Each byte crosses each link at
// most once; every link carries (N−1)·S bytes for equal parts of S.
//
// On a link, one chunk is a 16-byte header (the op's number, 8 bytes; the
// part's rank, 4 bytes; the chunk's length, 4 bytes; all big-endian), then
// that many bytes. Parts go in the order above, each in chunks of
// `chunk_bytes` (the last one shorter; none for an empty part).
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
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/peer/peer_link.h"

namespace fedgather {

// The size of a ring chunk's header on a link.
inline constexpr size_t kRingChunkHeaderBytes = 16;

struct RingAllGatherOptions {
  uint64_t op = 0;  // the op's number; every chunk header carries it
  size_t chunk_bytes = size_t{1} << 20;
  // A link that moves no chunk for this long fails the call.
  absl::Duration stall_timeout = absl::Seconds(5);
  // Tests only: sees each chunk this rank forwards, before it is sent (a
  // copy of the bytes in `out`); may change it.
  std::function<void(int part, char* data, size_t size)> forward_hook;
};

// RingAllGather: this member is `rank` of `part_sizes.size()`; `mine`
// holds its part (part_sizes[rank] bytes; it may be `out`'s own place);
// `out` receives every part in rank order, back to back. `to_next` and
// `from_prev` are the links to rank+1 and from rank−1 (the same member
// when N = 2, but two links); both unused when N = 1.
absl::Status RingAllGather(int rank, absl::Span<const size_t> part_sizes,
                           const char* mine, char* out, PeerLink* to_next,
                           PeerLink* from_prev,
                           const RingAllGatherOptions& options);

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_PEER_RING_ALL_GATHER_H_
