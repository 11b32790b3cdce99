// libFuzzer target: the collective frame decoder (common/frame_codec.h), the
// first parser every byte from the network meets. Any input must decode or
// be refused with a status; a chunk's data must stay inside the input. A
// decoded frame's digest fields go through what the server and client make
// of them (common/content_hasher.h): any algorithm number is known or a
// status, and a digest is taken only at 32 bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/content_hasher.h"
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
  if (!kind.ok()) return 0;
  fedgather::v1::DigestAlgorithm declared =
      fedgather::v1::DIGEST_ALGORITHM_UNSPECIFIED;
  std::vector<std::string> digests;
  if (*kind == fedgather::v1::CollectiveFrame::kHeader) {
    declared = message.header().digest_algorithm();
    digests.push_back(message.header().contribution_digest());
  } else if (*kind == fedgather::v1::CollectiveFrame::kCommit) {
    declared = message.commit().digest_algorithm();
    digests.push_back(message.commit().result_digest());
    for (const auto& entry : message.commit().contributions()) {
      digests.push_back(entry.digest());
    }
  } else if (*kind == fedgather::v1::CollectiveFrame::kEnd) {
    digests.push_back(message.end().digest());
  }
  const absl::StatusOr<fedgather::DigestAlgorithm> algorithm =
      fedgather::DigestAlgorithmFromProto(declared, "the frame");
  if (algorithm.ok() &&
      declared != fedgather::v1::DIGEST_ALGORITHM_UNSPECIFIED &&
      fedgather::DigestAlgorithmToProto(*algorithm) != declared) {
    __builtin_trap();  // a known number that does not read back as itself
  }
  for (const std::string& bytes : digests) {
    fedgather::Digest digest;
    if (fedgather::DigestFromBytes(bytes, &digest) != (bytes.size() == 32)) {
      __builtin_trap();  // a digest taken at another length
    }
  }
  return 0;
}
