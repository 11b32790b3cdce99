// Encoding and decoding of CollectiveFrame messages as raw gRPC byte buffers,
// so tensor bytes are never copied into a protobuf message:
// - EncodeChunkFrame references the caller's tensor memory from the buffer;
// - DecodeFrame hands a chunk's data to a ChunkSink as spans of the received
//   slices, so a receiver copies each byte once, into its output tensor.
// The encoding is the standard protobuf encoding of CollectiveFrame, so typed
// peers interoperate; the server forwards chunk buffers unchanged.
#ifndef FEDGATHER_COMMON_FRAME_CODEC_H_
#define FEDGATHER_COMMON_FRAME_CODEC_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fedgather/v1/fedgather.pb.h"

namespace fedgather {

// Where a chunk belongs; its data follows through ChunkSink::Data.
struct ChunkMeta {
  uint32_t rank = 0;
  uint32_t tensor_index = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// Receives one decoded chunk. Begin is called once, then Data for each span
// of the payload in order (none for an empty payload).
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  // Begin may reject the chunk; DecodeFrame then returns that status and
  // calls Data no more.
  virtual absl::Status Begin(const ChunkMeta& meta) = 0;
  virtual void Data(const uint8_t* data, size_t size) = 0;
};

// EncodeChunkFrame builds a CollectiveFrame{chunk} whose payload slice points
// at `data` without copying. `data` must stay valid and unchanged until the
// RPC that sends the buffer has finished.
grpc::ByteBuffer EncodeChunkFrame(const ChunkMeta& meta, const void* data);

// EncodeOwnedChunkFrame is EncodeChunkFrame for bytes the buffer owns (and
// frees with its last reference); meta.size is taken from `data`.
grpc::ByteBuffer EncodeOwnedChunkFrame(ChunkMeta meta, std::string data);

// EncodeFrame serializes a small frame (header, end, commit).
grpc::ByteBuffer EncodeFrame(const v1::CollectiveFrame& frame);

// DecodeFrame decodes `buffer`. For a chunk it calls `sink` and returns
// kChunk (INVALID_ARGUMENT when `sink` is null: no chunk may come); for any
// other frame it parses into `*message` and returns its kind.
// INVALID_ARGUMENT for malformed bytes, an empty frame or unknown fields.
absl::StatusOr<v1::CollectiveFrame::KindCase> DecodeFrame(
    grpc::ByteBuffer& buffer, v1::CollectiveFrame* message, ChunkSink* sink);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_FRAME_CODEC_H_
