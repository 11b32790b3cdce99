// JournalRecorder: a RoundRecorder that appends a round's records to its
// journal file (server/journal/journal_file.h), which RestoreRound reads
// back after a restart. Thread safety and ownership as RoundRecorder says;
// it owns its JournalFile.
#ifndef FEDGATHER_SERVER_RELAY_JOURNAL_RECORDER_H_
#define FEDGATHER_SERVER_RELAY_JOURNAL_RECORDER_H_

#include <cstdint>
#include <memory>

#include "server/journal/journal_file.h"
#include "server/relay/round_recorder.h"

namespace fedgather::server {

// The records of a round's journal, in the order they change its log, so
// that RestoreRound can rebuild the same log after a restart:
//   kAttach        a rank's header frame, accepted
//   kChunk         a chunk frame a rank uploaded, accepted
//   kEnd           a rank's contribution ended; the payload is its SHA-256
//                  (written before digests named their algorithm: read,
//                  never written)
//   kQuorumClosed  the quorum deadline closed the round to the ranks that
//                  had not started
//   kEndDigest     a rank's contribution ended; the payload is the
//                  algorithm (one byte, the protocol's DigestAlgorithm
//                  number) and the 32-byte digest
enum class RoundRecord : uint8_t {
  kAttach = 1,
  kChunk = 2,
  kEnd = 3,
  kQuorumClosed = 4,
  kEndDigest = 5,
};

class JournalRecorder : public RoundRecorder {
 public:
  // `journal` must not be null.
  explicit JournalRecorder(std::unique_ptr<JournalFile> journal);

  absl::Status Attached(int rank,
                        const grpc::ByteBuffer& header_frame) override;
  absl::Status Chunk(int rank, const grpc::ByteBuffer& frame) override;
  // Ended appends the kEndDigest record and syncs the journal (fdatasync).
  absl::Status Ended(int rank, DigestAlgorithm algorithm,
                     const Digest& digest) override;
  absl::Status QuorumClosed() override;
  absl::StatusOr<grpc::ByteBuffer> ReadFrame(int64_t offset,
                                             int64_t size) const override;

 private:
  const std::unique_ptr<JournalFile> journal_;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_RELAY_JOURNAL_RECORDER_H_
