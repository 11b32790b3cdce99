// RoundRecorder: where a round reports the changes to its log that must
// outlive the server process, so that a restarted server can rebuild the
// round (RestoreRound). The journal-backed recorder is JournalRecorder
// (journal_recorder.h); a round without one records nothing.
//
// Thread safety: a round calls its recorder under its own lock, from the
// thread that made the change, so the records come in the order the round
// changed; a recorder needs no lock of its own and must not call back into
// the round. Ownership: the round owns its recorder.
#ifndef FEDGATHER_SERVER_RELAY_ROUND_RECORDER_H_
#define FEDGATHER_SERVER_RELAY_ROUND_RECORDER_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/content_hasher.h"

namespace fedgather::server {

class RoundRecorder {
 public:
  virtual ~RoundRecorder() = default;

  // Each of these is called before the change it records takes effect; an
  // error fails the round with it.
  //
  // Attached: `rank`'s header, the frame `header_frame`, was accepted.
  virtual absl::Status Attached(int rank,
                                const grpc::ByteBuffer& header_frame) = 0;
  // Chunk: a chunk frame `rank` uploaded was accepted.
  virtual absl::Status Chunk(int rank, const grpc::ByteBuffer& frame) = 0;
  // Ended: `rank`'s contribution ended with `digest`, in `algorithm`.
  // Durable when it returns (it may wait on the disk), so a committed
  // round's contributions survive a power loss.
  virtual absl::Status Ended(int rank, DigestAlgorithm algorithm,
                             const Digest& digest) = 0;
  // QuorumClosed: the quorum deadline closed the round to the ranks that
  // had not started.
  virtual absl::Status QuorumClosed() = 0;

  // ReadFrame reads back `size` bytes of a recorded chunk frame at
  // `offset` (RestoreRound's replay says where each lies), for a restored
  // round whose oldest frames left memory.
  virtual absl::StatusOr<grpc::ByteBuffer> ReadFrame(int64_t offset,
                                                     int64_t size) const = 0;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_RELAY_ROUND_RECORDER_H_
