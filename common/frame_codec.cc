#include "common/frame_codec.h"

#include <google/protobuf/io/coded_stream.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace fedgather {
namespace {

using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;

// Wire tags: (field_number << 3) | wire_type.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t Tag(uint32_t field, uint32_t type) {
  return (field << 3) | type;
}
constexpr uint32_t kFrameChunkTag =
    Tag(v1::CollectiveFrame::kChunkFieldNumber, kLengthDelimited);
constexpr uint32_t kRankTag = Tag(v1::Chunk::kRankFieldNumber, kVarint);
constexpr uint32_t kTensorTag =
    Tag(v1::Chunk::kTensorIndexFieldNumber, kVarint);
constexpr uint32_t kOffsetTag = Tag(v1::Chunk::kOffsetFieldNumber, kVarint);
constexpr uint32_t kDataTag =
    Tag(v1::Chunk::kDataFieldNumber, kLengthDelimited);

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed chunk frame: ", what));
}

void NoopUnref(void*) {}

// Reads a chunk message of `length` bytes. The payload goes to `sink` as
// spans of the underlying slices when it follows the location fields, as our
// encoder writes it; a payload that comes first is buffered once.
absl::Status DecodeChunk(CodedInputStream& in, uint32_t length,
                         ChunkSink* sink) {
  // PushLimit takes an int and ignores a negative one: a length past
  // INT_MAX would lift every bound below.
  if (length > static_cast<uint32_t>(std::numeric_limits<int>::max())) {
    return Malformed(absl::StrCat("chunk length ", length, " is too large"));
  }
  const CodedInputStream::Limit limit = in.PushLimit(static_cast<int>(length));
  ChunkMeta meta;
  bool have_data = false;
  std::string early_data;  // payload seen before a location field
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    switch (tag) {
      case kRankTag:
        if (!in.ReadVarint32(&meta.rank)) return Malformed("bad rank");
        break;
      case kTensorTag:
        if (!in.ReadVarint32(&meta.tensor_index)) {
          return Malformed("bad tensor_index");
        }
        break;
      case kOffsetTag:
        if (!in.ReadVarint64(&meta.offset)) return Malformed("bad offset");
        break;
      case kDataTag: {
        if (have_data) return Malformed("payload appears twice");
        uint32_t size = 0;
        if (!in.ReadVarint32(&size) ||
            static_cast<int64_t>(in.BytesUntilLimit()) <
                static_cast<int64_t>(size)) {
          return Malformed("payload length exceeds the frame");
        }
        have_data = true;
        meta.size = size;
        if (in.BytesUntilLimit() == static_cast<int>(size)) {
          // The payload is last: stream it out of the slices.
          if (absl::Status s = sink->Begin(meta); !s.ok()) return s;
          uint32_t left = size;
          while (left > 0) {
            const void* ptr = nullptr;
            int available = 0;
            if (!in.GetDirectBufferPointer(&ptr, &available) ||
                available <= 0) {
              return Malformed("truncated payload");
            }
            const uint32_t take =
                std::min<uint32_t>(left, static_cast<uint32_t>(available));
            sink->Data(static_cast<const uint8_t*>(ptr), take);
            in.Skip(static_cast<int>(take));
            left -= take;
          }
          in.PopLimit(limit);
          return in.ReadTag() == 0 && in.ConsumedEntireMessage()
                     ? absl::OkStatus()
                     : Malformed("bytes after the chunk");
        }
        if (!in.ReadString(&early_data, static_cast<int>(size))) {
          return Malformed("truncated payload");
        }
        break;
      }
      default:
        return Malformed(absl::StrCat("unexpected field tag ", tag));
    }
  }
  // At the end of the input ReadTag returns 0 as if the message ended, so
  // a chunk cut short before its declared length is caught here.
  if (in.BytesUntilLimit() != 0 || !in.ConsumedEntireMessage()) {
    return Malformed("truncated chunk");
  }
  in.PopLimit(limit);
  if (in.ReadTag() != 0) return Malformed("bytes after the chunk");
  meta.size = early_data.size();
  if (absl::Status s = sink->Begin(meta); !s.ok()) return s;
  if (!early_data.empty()) {
    sink->Data(reinterpret_cast<const uint8_t*>(early_data.data()),
               early_data.size());
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// ChunkFrame prefixes `payload` (meta.size bytes) with the chunk's framing.
grpc::ByteBuffer ChunkFrame(const ChunkMeta& meta, grpc::Slice payload) {
  const size_t fields = CodedOutputStream::VarintSize32(kRankTag) +
                        CodedOutputStream::VarintSize32(meta.rank) +
                        CodedOutputStream::VarintSize32(kTensorTag) +
                        CodedOutputStream::VarintSize32(meta.tensor_index) +
                        CodedOutputStream::VarintSize32(kOffsetTag) +
                        CodedOutputStream::VarintSize64(meta.offset) +
                        CodedOutputStream::VarintSize32(kDataTag) +
                        CodedOutputStream::VarintSize64(meta.size);
  const uint64_t chunk_length = fields + meta.size;
  uint8_t prefix[64];
  uint8_t* p = prefix;
  p = CodedOutputStream::WriteVarint32ToArray(kFrameChunkTag, p);
  p = CodedOutputStream::WriteVarint64ToArray(chunk_length, p);
  p = CodedOutputStream::WriteVarint32ToArray(kRankTag, p);
  p = CodedOutputStream::WriteVarint32ToArray(meta.rank, p);
  p = CodedOutputStream::WriteVarint32ToArray(kTensorTag, p);
  p = CodedOutputStream::WriteVarint32ToArray(meta.tensor_index, p);
  p = CodedOutputStream::WriteVarint32ToArray(kOffsetTag, p);
  p = CodedOutputStream::WriteVarint64ToArray(meta.offset, p);
  p = CodedOutputStream::WriteVarint32ToArray(kDataTag, p);
  p = CodedOutputStream::WriteVarint64ToArray(meta.size, p);
  grpc::Slice slices[2] = {
      grpc::Slice(prefix, static_cast<size_t>(p - prefix)),
      std::move(payload),
  };
  return grpc::ByteBuffer(slices, meta.size > 0 ? 2 : 1);
}

void DeleteString(void* string) { delete static_cast<std::string*>(string); }

}  // namespace

grpc::ByteBuffer EncodeChunkFrame(const ChunkMeta& meta, const void* data) {
  return ChunkFrame(meta, grpc::Slice(const_cast<void*>(data), meta.size,
                                      &NoopUnref, nullptr));
}

grpc::ByteBuffer EncodeOwnedChunkFrame(ChunkMeta meta, std::string data) {
  meta.size = data.size();
  auto* owned = new std::string(std::move(data));
  return ChunkFrame(
      meta, grpc::Slice(owned->data(), owned->size(), &DeleteString, owned));
}

grpc::ByteBuffer EncodeFrame(const v1::CollectiveFrame& frame) {
  const std::string bytes = frame.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

absl::StatusOr<v1::CollectiveFrame::KindCase> DecodeFrame(
    grpc::ByteBuffer& buffer, v1::CollectiveFrame* message, ChunkSink* sink) {
  {
    grpc::ProtoBufferReader reader(&buffer);
    CodedInputStream in(&reader);
    const uint32_t tag = in.ReadTag();
    if (tag == kFrameChunkTag) {
      if (sink == nullptr) {
        return absl::InvalidArgumentError(
            "a chunk frame arrived where none may come");
      }
      uint32_t length = 0;
      if (!in.ReadVarint32(&length)) return Malformed("bad length");
      if (absl::Status s = DecodeChunk(in, length, sink); !s.ok()) return s;
      return v1::CollectiveFrame::kChunk;
    }
  }
  grpc::ProtoBufferReader reader(&buffer);
  if (!message->ParseFromZeroCopyStream(&reader)) {
    return absl::InvalidArgumentError("malformed frame: not a CollectiveFrame");
  }
  if (message->kind_case() == v1::CollectiveFrame::KIND_NOT_SET) {
    return absl::InvalidArgumentError("malformed frame: empty CollectiveFrame");
  }
  if (!message->GetReflection()->GetUnknownFields(*message).empty()) {
    return absl::InvalidArgumentError("malformed frame: unknown fields");
  }
  if (message->kind_case() == v1::CollectiveFrame::kChunk) {
    // A valid encoding whose chunk follows another field (the last oneof
    // member wins); rare, so its payload is delivered from the parsed copy.
    if (sink == nullptr) {
      return absl::InvalidArgumentError(
          "a chunk frame arrived where none may come");
    }
    const v1::Chunk& chunk = message->chunk();
    if (!chunk.GetReflection()->GetUnknownFields(chunk).empty()) {
      return Malformed("unknown fields");
    }
    ChunkMeta meta;
    meta.rank = chunk.rank();
    meta.tensor_index = chunk.tensor_index();
    meta.offset = chunk.offset();
    meta.size = chunk.data().size();
    if (absl::Status s = sink->Begin(meta); !s.ok()) return s;
    if (!chunk.data().empty()) {
      sink->Data(reinterpret_cast<const uint8_t*>(chunk.data().data()),
                 chunk.data().size());
    }
  }
  return message->kind_case();
}

}  // namespace fedgather
