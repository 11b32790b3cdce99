// ChunkSequence checks that one rank's chunks arrive as the protocol requires:
// tensors in fingerprint order, each tensor's bytes contiguous from offset 0,
// every chunk non-empty and at most the chunk limit, nothing past a tensor's
// declared size. Both the server (uploads) and the client (downloads) use it.
#ifndef FEDGATHER_COMMON_CHUNK_SEQUENCE_H_
#define FEDGATHER_COMMON_CHUNK_SEQUENCE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/fingerprint.h"

namespace fedgather {

class ChunkSequence {
 public:
  // `fingerprint` must have passed FingerprintFromProto and must outlive
  // this object. Not thread-safe.
  ChunkSequence(const Fingerprint& fingerprint, int64_t max_chunk_bytes);

  // Accept checks that (tensor_index, offset, size) is the next chunk and
  // advances past it. INVALID_ARGUMENT names the tensor, the offending values
  // and what was expected; the sequence is unchanged on error.
  absl::Status Accept(uint64_t tensor_index, uint64_t offset, uint64_t size);

  // SkipTo advances a fresh sequence past its first `bytes` bytes, as if the
  // chunks that hold them had been accepted (a resumed upload goes on from
  // there). Chunks may have any size up to the limit, so any byte count is
  // a place a chunk ended. INVALID_ARGUMENT when `bytes` is past the end.
  absl::Status SkipTo(int64_t bytes);

  // CheckComplete is OK when every byte has been accepted; else
  // INVALID_ARGUMENT naming the first incomplete tensor and the progress.
  absl::Status CheckComplete() const;

  int64_t bytes_done() const { return bytes_done_; }
  int64_t total_bytes() const { return total_bytes_; }
  const std::vector<int64_t>& tensor_bytes() const { return tensor_bytes_; }

 private:
  // Moves tensor_ past tensors that are complete (including empty ones).
  void SkipCompleteTensors();

  const Fingerprint& fingerprint_;
  const int64_t max_chunk_bytes_;
  std::vector<int64_t> tensor_bytes_;
  int64_t total_bytes_ = 0;
  size_t tensor_ = 0;   // index of the tensor expected next
  int64_t offset_ = 0;  // next expected offset within tensor_
  int64_t bytes_done_ = 0;
};

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_CHUNK_SEQUENCE_H_
