#include "client/peer/gather_all_reduce.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "client/peer/bruck_all_gather.h"
#include "common/element_reduction.h"

namespace fedgather {

absl::Status GatherAllReduce(
    int rank, const Fingerprint& tensors, v1::ReduceOp reduce,
    absl::Span<const double> weights, const char* mine, char* gathered,
    char* out, absl::Span<PeerLink* const> to, absl::Span<PeerLink* const> from,
    const RingOptions& options, std::vector<char>* accumulators) {
  const int world = static_cast<int>(weights.size());
  size_t bytes = 0;
  size_t most_accumulators = 0;
  for (const TensorSpec& spec : tensors) {
    const size_t elements =
        static_cast<size_t>(NumElements(spec.shape).value_or(0));
    bytes += elements * DTypeSize(spec.dtype);
    most_accumulators =
        std::max(most_accumulators, elements * AccumulatorBytes(spec.dtype));
  }
  const std::vector<size_t> part_sizes(world, bytes);
  absl::Status gather =
      BruckAllGather(rank, part_sizes, mine, gathered, to, from, options);
  if (!gather.ok()) return gather;

  // Accumulators are read as floats, doubles and 64-bit integers: a
  // vector<char>'s storage is aligned for all of them.
  if (accumulators->size() < most_accumulators) {
    accumulators->resize(most_accumulators);
  }
  auto* folded = reinterpret_cast<uint8_t*>(accumulators->data());
  const double total_weight =
      std::accumulate(weights.begin(), weights.end(), 0.0);
  size_t offset = 0;  // of the tensor, in a contribution
  for (const TensorSpec& spec : tensors) {
    const int64_t elements = NumElements(spec.shape).value_or(0);
    for (int r = 0; r < world; ++r) {
      const auto* contribution =
          reinterpret_cast<const uint8_t*>(gathered + bytes * r + offset);
      FoldIntoAccumulators(reduce, spec.dtype, /*first=*/r == 0, weights[r],
                           contribution, elements, folded);
    }
    ConvertAccumulators(reduce, spec.dtype, folded, elements, world,
                        total_weight, reinterpret_cast<uint8_t*>(out) + offset);
    offset += static_cast<size_t>(elements) * DTypeSize(spec.dtype);
  }
  return absl::OkStatus();
}

}  // namespace fedgather
