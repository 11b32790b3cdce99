#include "tests/client/peer/collective_test_data.h"

#include <cstring>
#include <random>
#include <thread>

#include "client/peer/bruck_all_gather.h"
#include "client/peer/gather_all_reduce.h"
#include "client/peer/ring_all_gather.h"
#include "client/peer/ring_all_reduce.h"
#include "common/dtype.h"
#include "common/element_reduction.h"
#include "common/tensor_spec.h"

namespace fedgather::testing {

std::string Part(int rank, size_t size, uint32_t seed) {
  std::mt19937 random(seed * 1000 + rank);
  std::string part(size, '\0');
  for (char& c : part) c = static_cast<char>(random());
  return part;
}

std::string Expected(const std::vector<size_t>& sizes, uint32_t seed) {
  std::string all;
  for (int r = 0; r < static_cast<int>(sizes.size()); ++r) {
    all += Part(r, sizes[r], seed);
  }
  return all;
}

GatherCall RingGatherOver(const TestRing& ring) {
  return [&ring](int r, const std::vector<size_t>& sizes, const char* mine,
                 char* out, const RingOptions& options) {
    return RingAllGather(r, sizes, mine, out, ring.to_next(r),
                         ring.from_prev(r), options);
  };
}

GatherCall BruckGatherOver(const TestRing& ring) {
  return [&ring](int r, const std::vector<size_t>& sizes, const char* mine,
                 char* out, const RingOptions& options) {
    return BruckAllGather(r, sizes, mine, out, ring.to_links(r),
                          ring.from_links(r), options);
  };
}

RankOutcome RunGather(const GatherCall& gather,
                      const std::vector<size_t>& sizes,
                      const std::vector<RingOptions>& options, uint32_t seed,
                      int absent) {
  const int world = static_cast<int>(sizes.size());
  size_t total = 0;
  for (size_t s : sizes) total += s;
  RankOutcome outcome{std::vector<absl::Status>(world),
                      std::vector<std::string>(world, std::string(total, '?'))};
  std::vector<std::string> parts;
  for (int r = 0; r < world; ++r) parts.push_back(Part(r, sizes[r], seed));
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    if (r == absent) continue;
    ranks.emplace_back([&, r] {
      outcome.status[r] =
          gather(r, sizes, parts[r].data(), outcome.out[r].data(), options[r]);
    });
  }
  for (std::thread& t : ranks) t.join();
  return outcome;
}

ReduceCall RingReduceOver(const TestRing& ring) {
  return [&ring](int r, const Fingerprint& tensors, v1::ReduceOp reduce,
                 const std::vector<double>& weights, const char* mine,
                 char* out, const RingOptions& options) {
    std::vector<char> accumulators;
    return RingAllReduce(r, tensors, reduce, weights, mine, out,
                         ring.to_next(r), ring.from_prev(r), options,
                         &accumulators);
  };
}

ReduceCall GatherReduceOver(const TestRing& ring) {
  return [&ring](int r, const Fingerprint& tensors, v1::ReduceOp reduce,
                 const std::vector<double>& weights, const char* mine,
                 char* out, const RingOptions& options) {
    size_t bytes = 0;
    for (const TensorSpec& spec : tensors) {
      bytes += static_cast<size_t>(Elements(spec)) * DTypeSize(spec.dtype);
    }
    std::vector<char> gathered(bytes * weights.size());
    std::vector<char> accumulators;
    return GatherAllReduce(r, tensors, reduce, weights, mine, gathered.data(),
                           out, ring.to_links(r), ring.from_links(r), options,
                           &accumulators);
  };
}

RankOutcome RunReduce(const ReduceCall& reduce_call, const Fingerprint& tensors,
                      v1::ReduceOp reduce, const std::vector<double>& weights,
                      const std::vector<std::string>& contributions,
                      const std::vector<RingOptions>& options, int absent) {
  const int world = static_cast<int>(weights.size());
  RankOutcome outcome{std::vector<absl::Status>(world),
                      std::vector<std::string>(
                          world, std::string(contributions[0].size(), '?'))};
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    if (r == absent) continue;
    ranks.emplace_back([&, r] {
      outcome.status[r] =
          reduce_call(r, tensors, reduce, weights, contributions[r].data(),
                      outcome.out[r].data(), options[r]);
    });
  }
  for (std::thread& t : ranks) t.join();
  return outcome;
}

std::vector<int> RingFoldOrder(int64_t element, int64_t elements, int world) {
  int segment = 0;
  while (static_cast<int64_t>(static_cast<__int128>(elements) * (segment + 1) /
                              world) <= element) {
    ++segment;
  }
  std::vector<int> order;
  for (int i = 1; i <= world; ++i) order.push_back((segment + i) % world);
  return order;
}

std::vector<int> RankFoldOrder(int64_t, int64_t, int world) {
  std::vector<int> order;
  for (int r = 0; r < world; ++r) order.push_back(r);
  return order;
}

std::string ReferenceReduce(const Fingerprint& tensors, v1::ReduceOp reduce,
                            const std::vector<double>& weights,
                            const std::vector<std::string>& contributions,
                            const FoldOrder& order) {
  const int world = static_cast<int>(weights.size());
  int64_t total = 0;
  for (const TensorSpec& spec : tensors) total += Elements(spec);
  double total_weight = 0;
  for (double w : weights) total_weight += w;
  std::string out(contributions[0].size(), '\0');
  int64_t element = 0;
  size_t offset = 0;
  for (const TensorSpec& spec : tensors) {
    const size_t size = DTypeSize(spec.dtype);
    for (int64_t e = 0; e < Elements(spec); ++e, ++element, offset += size) {
      alignas(8) uint8_t accumulator[8];
      bool first = true;
      for (int r : order(element, total, world)) {
        FoldIntoAccumulators(
            reduce, spec.dtype, first, weights[r],
            reinterpret_cast<const uint8_t*>(contributions[r].data()) + offset,
            1, accumulator);
        first = false;
      }
      ConvertAccumulators(reduce, spec.dtype, accumulator, 1, world,
                          total_weight,
                          reinterpret_cast<uint8_t*>(out.data()) + offset);
    }
  }
  return out;
}

std::vector<ReduceCase> ReduceCases() {
  const Fingerprint mixed = {
      {"a", DType::kF32, {300, 3}}, {"b", DType::kF16, {777}},
      {"c", DType::kI32, {5}},      {"d", DType::kBF16, {0}},
      {"e", DType::kF64, {3}},      {"f", DType::kI8, {64}},
      {"g", DType::kBF16, {129}}};
  const Fingerprint floating = {{"a", DType::kF32, {1000}},
                                {"b", DType::kBF16, {333}},
                                {"c", DType::kF64, {17}},
                                {"d", DType::kF16, {2}}};
  const Fingerprint tiny = {{"x", DType::kF32, {2}}};  // fewer than N
  return {{mixed, v1::SUM},
          {mixed, v1::MIN},
          {mixed, v1::MAX},
          {floating, v1::MEAN},
          {floating, v1::WEIGHTED_MEAN},
          {tiny, v1::SUM}};
}

int64_t Elements(const TensorSpec& spec) {
  return NumElements(spec.shape).value();
}

std::string Contribution(const Fingerprint& tensors, int rank, uint32_t seed) {
  std::mt19937 random(seed * 1000 + rank);
  std::string bytes;
  for (const TensorSpec& spec : tensors) {
    for (int64_t e = 0; e < Elements(spec); ++e) {
      uint64_t bits = random() | (uint64_t{random()} << 32);
      switch (spec.dtype) {
        case DType::kF32: {
          const float f = std::uniform_real_distribution<float>(-2, 2)(random);
          std::memcpy(&bits, &f, 4);
          break;
        }
        case DType::kF64: {
          const double d =
              std::uniform_real_distribution<double>(-2, 2)(random);
          std::memcpy(&bits, &d, 8);
          break;
        }
        case DType::kF16:  // exponent 1..29: a normal, modest number
          bits = (bits & 0x83ff) | ((1 + bits % 29) << 10);
          break;
        case DType::kBF16:  // exponent 100..139
          bits = (bits & 0x807f) | ((100 + bits % 40) << 7);
          break;
        default:
          break;
      }
      bytes.append(reinterpret_cast<const char*>(&bits), DTypeSize(spec.dtype));
    }
  }
  return bytes;
}

}  // namespace fedgather::testing
