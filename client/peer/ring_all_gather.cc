#include "client/peer/ring_all_gather.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace fedgather {

absl::Status RingAllGather(int rank, absl::Span<const size_t> part_sizes,
                           const char* mine, char* out, PeerLink* to_next,
                           PeerLink* from_prev, const RingOptions& options) {
  const int world = static_cast<int>(part_sizes.size());
  if (rank < 0 || rank >= world || options.chunk_bytes == 0 ||
      options.chunk_bytes > (size_t{1} << 31)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring all_gather: rank ", rank, " of ", world,
                     ", chunks of ", options.chunk_bytes, " bytes"));
  }
  std::vector<size_t> offsets(world + 1, 0);
  for (int p = 0; p < world; ++p) offsets[p + 1] = offsets[p] + part_sizes[p];
  if (mine != out + offsets[rank] && part_sizes[rank] > 0) {
    std::memcpy(out + offsets[rank], mine, part_sizes[rank]);
  }
  if (world == 1) return absl::OkStatus();

  const int next = (rank + 1) % world;
  // Parts this rank passes on: every part but its own and its successor's.
  size_t to_forward = 0;
  for (int p = 0; p < world; ++p) {
    if (p != rank && p != next) to_forward += part_sizes[p];
  }
  RingExchange exchange(to_next, from_prev);
  std::thread sender([&] {
    const size_t chunk = options.chunk_bytes;
    for (size_t at = 0; at < part_sizes[rank]; at += chunk) {
      const size_t n = std::min(chunk, part_sizes[rank] - at);
      absl::Status status =
          SendRingChunk(to_next, options, rank, out + offsets[rank] + at, n);
      if (!status.ok()) return exchange.Fail(status);
    }
    ForwardRingPieces(to_next, options, &exchange, out, to_forward);
  });

  for (int k = 1; k < world; ++k) {
    const int part = (rank - k + world) % world;
    const bool forward = part != next;
    for (size_t at = 0; at < part_sizes[part];) {
      const size_t due = std::min(options.chunk_bytes, part_sizes[part] - at);
      absl::Status status = ReceiveRingChunk(from_prev, options, part, due, at,
                                             out + offsets[part] + at);
      if (!status.ok()) {
        exchange.Fail(status);
        sender.join();
        return exchange.first_error();
      }
      if (forward) exchange.Push({part, offsets[part] + at, due});
      at += due;
    }
  }
  sender.join();
  return exchange.first_error();
}

}  // namespace fedgather
