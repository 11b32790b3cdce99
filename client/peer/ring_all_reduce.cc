#include "client/peer/ring_all_reduce.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/peer/ring_all_gather.h"
#include "common/element_reduction.h"

namespace fedgather {
namespace {

// A run of one tensor's elements within a segment: what one
// reduce-scatter chunk carries.
struct Run {
  int tensor;
  int64_t count;              // elements
  size_t accumulator_offset;  // of its first accumulator, in bytes
  size_t element_offset;      // of its first element in the contribution
};

// Where each segment's elements lie, in runs of at most `chunk_bytes` of
// accumulators.
class SegmentLayout {
 public:
  SegmentLayout(const Fingerprint& tensors, int world, size_t chunk_bytes)
      : runs_(world),
        bytes_(world, 0),
        offsets_(world, 0),
        accumulator_offsets_(world, 0) {
    int64_t total = 0;
    for (const TensorSpec& spec : tensors) {
      total += NumElements(spec.shape).value_or(0);
    }
    auto bound = [&](int s) {
      return total / world * s + total % world * s / world;
    };
    int64_t start = 0;  // the tensor's first element, of all
    size_t element_offset = 0;
    size_t accumulator_offset = 0;
    for (size_t t = 0; t < tensors.size(); ++t) {
      // Each tensor's accumulators start 8-byte aligned (they are read as
      // floats, doubles and 64-bit integers).
      accumulator_offset = (accumulator_offset + 7) / 8 * 8;
      const int64_t elements = NumElements(tensors[t].shape).value_or(0);
      const size_t element_size = DTypeSize(tensors[t].dtype);
      const size_t accumulator_size = AccumulatorBytes(tensors[t].dtype);
      const int64_t per_chunk = std::max<int64_t>(
          1, static_cast<int64_t>(chunk_bytes / accumulator_size));
      for (int s = 0; s < world; ++s) {
        const int64_t lo = std::max(bound(s), start);
        const int64_t hi = std::min(bound(s + 1), start + elements);
        for (int64_t e = lo; e < hi; e += per_chunk) {
          const int64_t within = e - start;
          Run run{static_cast<int>(t), std::min(per_chunk, hi - e),
                  accumulator_offset +
                      static_cast<size_t>(within) * accumulator_size,
                  element_offset + static_cast<size_t>(within) * element_size};
          if (bytes_[s] == 0 && runs_[s].empty()) {
            offsets_[s] = run.element_offset;
            accumulator_offsets_[s] = run.accumulator_offset;
          }
          bytes_[s] += static_cast<size_t>(run.count) * element_size;
          runs_[s].push_back(run);
        }
      }
      start += elements;
      element_offset += static_cast<size_t>(elements) * element_size;
      accumulator_offset += static_cast<size_t>(elements) * accumulator_size;
    }
    accumulator_bytes_ = accumulator_offset;
    // An empty segment lies where the next one starts.
    for (int s = world - 1; s >= 0; --s) {
      if (!runs_[s].empty()) continue;
      offsets_[s] = s + 1 < world ? offsets_[s + 1] : element_offset;
    }
  }

  const std::vector<Run>& runs(int segment) const { return runs_[segment]; }
  // The segments' sizes and offsets in the contribution's layout.
  const std::vector<size_t>& bytes() const { return bytes_; }
  size_t offset(int segment) const { return offsets_[segment]; }
  size_t accumulator_offset(int segment) const {
    return accumulator_offsets_[segment];
  }
  size_t accumulator_bytes() const { return accumulator_bytes_; }

 private:
  std::vector<std::vector<Run>> runs_;
  std::vector<size_t> bytes_;
  std::vector<size_t> offsets_;
  std::vector<size_t> accumulator_offsets_;
  size_t accumulator_bytes_ = 0;
};

}  // namespace

absl::Status RingAllReduce(int rank, const Fingerprint& tensors,
                           v1::ReduceOp reduce,
                           absl::Span<const double> weights, const char* mine,
                           char* out, PeerLink* to_next, PeerLink* from_prev,
                           const RingOptions& options,
                           std::vector<char>* accumulators) {
  const int world = static_cast<int>(weights.size());
  if (rank < 0 || rank >= world || options.chunk_bytes == 0 ||
      options.chunk_bytes > (size_t{1} << 31)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring all_reduce: rank ", rank, " of ", world,
                     ", chunks of ", options.chunk_bytes, " bytes"));
  }
  const SegmentLayout layout(tensors, world, options.chunk_bytes);
  const double total_weight =
      std::accumulate(weights.begin(), weights.end(), 0.0);
  if (accumulators->size() < layout.accumulator_bytes()) {
    accumulators->resize(layout.accumulator_bytes());
  }
  char* base = accumulators->data();
  auto* folded = reinterpret_cast<uint8_t*>(base);
  const auto* own = reinterpret_cast<const uint8_t*>(mine);
  auto fold = [&](const Run& run, bool first) {
    FoldIntoAccumulators(reduce, tensors[run.tensor].dtype, first,
                         weights[rank], own + run.element_offset, run.count,
                         folded + run.accumulator_offset);
  };
  auto finish = [&](const Run& run) {
    ConvertAccumulators(reduce, tensors[run.tensor].dtype,
                        folded + run.accumulator_offset, run.count, world,
                        total_weight,
                        reinterpret_cast<uint8_t*>(out) + run.element_offset);
  };
  auto run_bytes = [&](const Run& run) {
    return static_cast<size_t>(run.count) *
           AccumulatorBytes(tensors[run.tensor].dtype);
  };
  if (world == 1) {
    for (const Run& run : layout.runs(0)) {
      fold(run, /*first=*/true);
      finish(run);
    }
    return absl::OkStatus();
  }

  // The reduce-scatter. Rank r starts segment r−1 and receives segments
  // r−2, …, r (step k brings segment r−2−k); it passes on all but the last.
  auto segment_at = [&](int step) {
    return ((rank - 2 - step) % world + world) % world;
  };
  size_t to_forward = 0;
  for (int k = 0; k + 2 < world; ++k) {
    for (const Run& run : layout.runs(segment_at(k)))
      to_forward += run_bytes(run);
  }
  RingExchange exchange(to_next, from_prev);
  std::thread sender([&] {
    const int first_segment = (rank - 1 + world) % world;
    for (const Run& run : layout.runs(first_segment)) {
      fold(run, /*first=*/true);
      absl::Status status =
          SendRingChunk(to_next, options, first_segment,
                        base + run.accumulator_offset, run_bytes(run));
      if (!status.ok()) return exchange.Fail(status);
    }
    ForwardRingPieces(to_next, options, &exchange, base, to_forward);
  });
  for (int k = 0; k + 1 < world; ++k) {
    const int segment = segment_at(k);
    for (const Run& run : layout.runs(segment)) {
      const size_t size = run_bytes(run);
      absl::Status status = ReceiveRingChunk(
          from_prev, options, segment, size,
          run.accumulator_offset - layout.accumulator_offset(segment),
          base + run.accumulator_offset);
      if (!status.ok()) {
        exchange.Fail(status);
        sender.join();
        return exchange.first_error();
      }
      fold(run, /*first=*/false);
      if (k + 2 < world) {
        exchange.Push({segment, run.accumulator_offset, size});
      } else {
        finish(run);
      }
    }
  }
  sender.join();
  if (absl::Status status = exchange.first_error(); !status.ok()) return status;

  // The all_gather of the reduced segments, segment s as rank s's part.
  return RingAllGather(rank, layout.bytes(), out + layout.offset(rank), out,
                       to_next, from_prev, options);
}

}  // namespace fedgather
