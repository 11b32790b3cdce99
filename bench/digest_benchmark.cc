// Micro-benchmarks of the contribution digests (common/content_hasher.h):
// SHA-256 (OpenSSL, SHA-NI where the CPU has it) and BLAKE3 (the C sources
// from Debian's librust-blake3-dev, SSE2 to AVX-512 chosen at run time) on
// 1 MiB buffers, fed in one piece and in the pieces a receiver sees; then
// what a receiver does with each chunk, copy it into the output and hash it,
// inline (as the client does) and with the hash on a second thread.
#include <benchmark/benchmark.h>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "common/content_hasher.h"

namespace fedgather {
namespace {

constexpr size_t kBuffer = size_t{1} << 20;

std::vector<uint8_t> Bytes(size_t size) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(i * 131);
  return bytes;
}

// range(0): the piece size each Update gets; range(1): how many bytes short
// of a piece the first one is, as when a chunk's payload starts after the
// frame's header in a gRPC slice (every later piece is then off BLAKE3's
// 1 KiB chunk grid).
void Hash(benchmark::State& state, DigestAlgorithm algorithm) {
  const std::vector<uint8_t> input = Bytes(kBuffer);
  const size_t piece = static_cast<size_t>(state.range(0));
  const size_t short_by = static_cast<size_t>(state.range(1));
  for (auto _ : state) {
    ContentHasher hasher(algorithm);
    size_t at = 0;
    for (size_t next = piece - short_by; at < input.size(); next = piece) {
      const size_t n = std::min(next, input.size() - at);
      hasher.Update(input.data() + at, n);
      at += n;
    }
    benchmark::DoNotOptimize(hasher.Finish());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(kBuffer));
}
BENCHMARK_CAPTURE(Hash, sha256, DigestAlgorithm::kSha256)
    ->Args({1 << 20, 0})
    ->Args({16 << 10, 0})
    ->Args({16 << 10, 13});
BENCHMARK_CAPTURE(Hash, blake3, DigestAlgorithm::kBlake3)
    ->Args({1 << 20, 0})
    ->Args({16 << 10, 0})
    ->Args({16 << 10, 13})
    ->Args({4 << 10, 13});

// A receiver's work for 64 MiB arriving in 16 KiB pieces: copy each into a
// 64 MiB output and hash it while it is in cache.
constexpr size_t kStream = size_t{64} << 20;
constexpr size_t kPiece = size_t{16} << 10;

void CopyAndHashInline(benchmark::State& state, DigestAlgorithm algorithm) {
  const std::vector<uint8_t> input = Bytes(kPiece);
  std::vector<uint8_t> output(kStream);
  for (auto _ : state) {
    ContentHasher hasher(algorithm);
    for (size_t at = 0; at < kStream; at += kPiece) {
      std::memcpy(output.data() + at, input.data(), kPiece);
      hasher.Update(output.data() + at, kPiece);
    }
    benchmark::DoNotOptimize(hasher.Finish());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(kStream));
}
BENCHMARK_CAPTURE(CopyAndHashInline, sha256, DigestAlgorithm::kSha256)
    ->UseRealTime();
BENCHMARK_CAPTURE(CopyAndHashInline, blake3, DigestAlgorithm::kBlake3)
    ->UseRealTime();

// The same with the hash on a second thread: the copier publishes how far
// the output is filled; the hasher follows behind.
void CopyAndHashOnAThread(benchmark::State& state, DigestAlgorithm algorithm) {
  const std::vector<uint8_t> input = Bytes(kPiece);
  std::vector<uint8_t> output(kStream);
  for (auto _ : state) {
    std::mutex mu;
    std::condition_variable filled_more;
    size_t filled = 0;
    std::thread hashing([&] {
      ContentHasher hasher(algorithm);
      size_t done = 0;
      while (done < kStream) {
        size_t until;
        {
          std::unique_lock<std::mutex> lock(mu);
          filled_more.wait(lock, [&] { return filled > done; });
          until = filled;
        }
        hasher.Update(output.data() + done, until - done);
        done = until;
      }
      benchmark::DoNotOptimize(hasher.Finish());
    });
    for (size_t at = 0; at < kStream; at += kPiece) {
      std::memcpy(output.data() + at, input.data(), kPiece);
      {
        std::lock_guard<std::mutex> lock(mu);
        filled = at + kPiece;
      }
      filled_more.notify_one();
    }
    hashing.join();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(kStream));
}
BENCHMARK_CAPTURE(CopyAndHashOnAThread, sha256, DigestAlgorithm::kSha256)
    ->UseRealTime();
BENCHMARK_CAPTURE(CopyAndHashOnAThread, blake3, DigestAlgorithm::kBlake3)
    ->UseRealTime();

}  // namespace
}  // namespace fedgather

BENCHMARK_MAIN();
