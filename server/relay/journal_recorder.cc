#include "server/relay/journal_recorder.h"

#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace fedgather::server {

JournalRecorder::JournalRecorder(std::unique_ptr<JournalFile> journal)
    : journal_(std::move(journal)) {}

absl::Status JournalRecorder::Attached(int rank,
                                       const grpc::ByteBuffer& header_frame) {
  return journal_->Append(static_cast<uint8_t>(RoundRecord::kAttach),
                          static_cast<uint32_t>(rank), header_frame);
}

absl::Status JournalRecorder::Chunk(int rank, const grpc::ByteBuffer& frame) {
  return journal_->Append(static_cast<uint8_t>(RoundRecord::kChunk),
                          static_cast<uint32_t>(rank), frame);
}

absl::Status JournalRecorder::Ended(int rank, DigestAlgorithm algorithm,
                                    const Digest& digest) {
  std::string payload(1, static_cast<char>(algorithm));
  payload += DigestBytes(digest);
  absl::Status written =
      journal_->Append(static_cast<uint8_t>(RoundRecord::kEndDigest),
                       static_cast<uint32_t>(rank), payload);
  if (!written.ok()) return written;
  return journal_->Sync();
}

absl::Status JournalRecorder::QuorumClosed() {
  return journal_->Append(static_cast<uint8_t>(RoundRecord::kQuorumClosed), 0,
                          absl::string_view());
}

absl::StatusOr<grpc::ByteBuffer> JournalRecorder::ReadFrame(
    int64_t offset, int64_t size) const {
  return journal_->ReadAt(offset, size);
}

}  // namespace fedgather::server
