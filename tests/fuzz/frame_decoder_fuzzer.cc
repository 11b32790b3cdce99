// libFuzzer target: the collective frame decoder (common/frame_codec.h), the
// first parser every byte from the network meets. Any input must decode or
// be refused with a status; a chunk's data must stay inside the input.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/frame_codec.h"

namespace {

class CheckingSink : public fedgather::ChunkSink {
 public:
  absl::Status Begin(const fedgather::ChunkMeta& meta) override {
    expected_ = meta.size;
    return absl::OkStatus();
  }
  void Data(const uint8_t* data, size_t size) override {
    // Touch every byte: ASan reports a span that runs past the input.
    for (size_t i = 0; i < size; ++i) sum_ += data[i];
    received_ += size;
  }
  uint64_t expected_ = 0;
  uint64_t received_ = 0;
  uint64_t sum_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  grpc::Slice slice(data, size);
  grpc::ByteBuffer buffer(&slice, 1);
  fedgather::v1::CollectiveFrame message;
  CheckingSink sink;
  absl::StatusOr<fedgather::v1::CollectiveFrame::KindCase> kind =
      fedgather::DecodeFrame(buffer, &message, &sink);
  if (kind.ok() && *kind == fedgather::v1::CollectiveFrame::kChunk &&
      sink.received_ != sink.expected_) {
    __builtin_trap();  // a chunk decoded with other than its declared size
  }
  return 0;
}
