// Micro-benchmarks of common/frame_codec: building a chunk frame around
// tensor memory (what a client and the server do per chunk sent) and decoding
// one into an output buffer (what a client does per chunk received).
// Sizes are chunk payload sizes; the server's default chunk limit is 1 MiB.
#include <benchmark/benchmark.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/frame_codec.h"

namespace fedgather {
namespace {

// CopySink writes chunk data into `out` at the chunk's offset, as the
// client's receive path writes into the output tensor.
class CopySink : public ChunkSink {
 public:
  explicit CopySink(std::vector<uint8_t>* out) : out_(out) {}
  absl::Status Begin(const ChunkMeta& meta) override {
    at_ = meta.offset;
    return absl::OkStatus();
  }
  void Data(const uint8_t* data, size_t size) override {
    std::memcpy(out_->data() + at_, data, size);
    at_ += size;
  }

 private:
  std::vector<uint8_t>* out_;
  size_t at_ = 0;
};

ChunkMeta Meta(size_t size) {
  ChunkMeta meta;
  meta.rank = 3;
  meta.tensor_index = 0;
  meta.offset = 0;
  meta.size = size;
  return meta;
}

// The bytes of an encoded chunk frame, cut into slices of `slice_bytes`
// (0: one slice), as a received buffer arrives in transport-sized pieces.
grpc::ByteBuffer Received(size_t size, size_t slice_bytes) {
  const std::vector<uint8_t> payload(size, 0x5a);
  grpc::ByteBuffer encoded = EncodeChunkFrame(Meta(size), payload.data());
  std::vector<grpc::Slice> parts;
  (void)encoded.Dump(&parts);
  std::string flat;
  for (const grpc::Slice& part : parts) {
    flat.append(reinterpret_cast<const char*>(part.begin()), part.size());
  }
  std::vector<grpc::Slice> slices;
  const size_t step = slice_bytes == 0 ? flat.size() : slice_bytes;
  for (size_t at = 0; at < flat.size(); at += step) {
    slices.emplace_back(flat.substr(at, step));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

void BM_EncodeChunkFrame(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  const std::vector<uint8_t> payload(size, 0x5a);
  for (auto _ : state) {
    grpc::ByteBuffer frame = EncodeChunkFrame(Meta(size), payload.data());
    benchmark::DoNotOptimize(frame);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(size));
}
BENCHMARK(BM_EncodeChunkFrame)->RangeMultiplier(16)->Range(4 << 10, 4 << 20);

// DecodeFrame into an output buffer; range(1) is the slice size the frame
// arrives in (0: one slice; 16 KiB: one TLS record each).
void BM_DecodeChunkFrame(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  const grpc::ByteBuffer received =
      Received(size, static_cast<size_t>(state.range(1)));
  std::vector<uint8_t> out(size);
  v1::CollectiveFrame message;
  for (auto _ : state) {
    grpc::ByteBuffer buffer = received;  // shares the slices
    CopySink sink(&out);
    absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
        DecodeFrame(buffer, &message, &sink);
    if (!kind.ok() || *kind != v1::CollectiveFrame::kChunk) {
      state.SkipWithError("decode failed");
      break;
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(size));
}
BENCHMARK(BM_DecodeChunkFrame)
    ->ArgsProduct({benchmark::CreateRange(4 << 10, 4 << 20, 16),
                   {0, 16 << 10}});

void BM_EncodeDecodeSmallFrame(benchmark::State& state) {
  v1::CollectiveFrame frame;
  frame.mutable_end();
  v1::CollectiveFrame message;
  for (auto _ : state) {
    grpc::ByteBuffer buffer = EncodeFrame(frame);
    absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
        DecodeFrame(buffer, &message, nullptr);
    benchmark::DoNotOptimize(kind);
  }
}
BENCHMARK(BM_EncodeDecodeSmallFrame);

}  // namespace
}  // namespace fedgather

BENCHMARK_MAIN();
