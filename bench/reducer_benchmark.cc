// Micro-benchmarks of server/reducer: folding every rank's copy of one chunk
// into the accumulator and converting the finished chunk back, as the server
// does for each chunk of an ALL_REDUCE round. Bytes processed count every
// rank's input (world * chunk).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "server/relay/reducer.h"

namespace fedgather::server {
namespace {

constexpr int kWorld = 4;

// range(0): chunk bytes; `op` and `dtype` as named by the registration.
void ReduceChunk(benchmark::State& state, v1::ReduceOp op, DType dtype) {
  const int64_t bytes = state.range(0);
  const int64_t elements = bytes / static_cast<int64_t>(DTypeSize(dtype));
  // Every rank's chunk: small distinct values, valid in every dtype.
  std::vector<std::vector<uint8_t>> inputs(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    inputs[r].assign(static_cast<size_t>(bytes), static_cast<uint8_t>(r + 1));
    if (dtype == DType::kBF16 || dtype == DType::kF16) {
      for (int64_t i = 1; i < bytes; i += 2) inputs[r][i] = 0x3c;  // ~1.0
    }
  }
  for (auto _ : state) {
    absl::StatusOr<std::unique_ptr<Reducer>> reducer =
        Reducer::Create(op, {{"t", dtype, {elements}}}, kWorld, bytes);
    if (!reducer.ok()) {
      state.SkipWithError("Reducer::Create failed");
      break;
    }
    absl::StatusOr<Reducer::Added> added;
    for (int r = 0; r < kWorld; ++r) {
      added = (*reducer)->Add(r, r + 1.0, 0, 0, inputs[r].data(), bytes);
    }
    if (!added.ok() || added->finished.size() != 1) {
      state.SkipWithError("the reduction did not finish the chunk");
      break;
    }
    benchmark::DoNotOptimize(added);
  }
  state.SetBytesProcessed(state.iterations() * bytes * kWorld);
}

BENCHMARK_CAPTURE(ReduceChunk, sum_f32, v1::SUM, DType::kF32)
    ->RangeMultiplier(16)
    ->Range(64 << 10, 4 << 20);
BENCHMARK_CAPTURE(ReduceChunk, mean_f32, v1::MEAN, DType::kF32)
    ->RangeMultiplier(16)
    ->Range(64 << 10, 4 << 20);
BENCHMARK_CAPTURE(ReduceChunk, max_f32, v1::MAX, DType::kF32)->Arg(1 << 20);
BENCHMARK_CAPTURE(ReduceChunk, weighted_mean_f32, v1::WEIGHTED_MEAN,
                  DType::kF32)
    ->Arg(1 << 20);
BENCHMARK_CAPTURE(ReduceChunk, mean_bf16, v1::MEAN, DType::kBF16)->Arg(1 << 20);
BENCHMARK_CAPTURE(ReduceChunk, mean_f16, v1::MEAN, DType::kF16)->Arg(1 << 20);
BENCHMARK_CAPTURE(ReduceChunk, mean_f64, v1::MEAN, DType::kF64)->Arg(1 << 20);
BENCHMARK_CAPTURE(ReduceChunk, sum_i64, v1::SUM, DType::kI64)->Arg(1 << 20);

}  // namespace
}  // namespace fedgather::server

BENCHMARK_MAIN();
