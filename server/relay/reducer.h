// Reducer: the element-wise reduction of one ALL_REDUCE round, by element
// range, as the ranks' chunks arrive. Each rank uploads its tensors in
// fingerprint order, each from offset 0, in chunks it cuts as it likes (any
// size, ending anywhere, even inside an element); the reducer follows each
// rank's byte cursor, keeps the bytes of an element a chunk cut in two until
// the rest arrives, and folds whole elements into one accumulator window per
// tensor. An element is finished once every contributor has folded it; the
// finished elements are converted back to the tensor's dtype and handed out
// as result chunks that are contiguous, end on element boundaries and hold
// at most `max_result_bytes` bytes each, so the result does not depend on
// how any rank cut its upload. Memory is proportional to the elements some
// but not all contributors have folded (plus at most one result chunk being
// filled per tensor), never to the world size times the contribution.
//
// Accumulation: as common/element_reduction.h says. MEAN and WEIGHTED_MEAN
// take floating tensors only; BOOL cannot be reduced. Floating results depend
// on the order in which ranks' elements arrive only through fp32 (fp64)
// rounding.
//
// Not thread-safe: the round calls it under its lock.
#ifndef FEDGATHER_SERVER_RELAY_REDUCER_H_
#define FEDGATHER_SERVER_RELAY_REDUCER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/fingerprint.h"
#include "fedgather/v1/fedgather.pb.h"

namespace fedgather::server {

class Reducer {
 public:
  // Create checks that `op` can reduce every tensor of `fingerprint`
  // (CheckReducible): INVALID_ARGUMENT naming the tensor and its dtype
  // otherwise, or for an unspecified op. Result chunks hold at most
  // `max_result_bytes` (> 0) bytes.
  static absl::StatusOr<std::unique_ptr<Reducer>> Create(
      v1::ReduceOp op, const Fingerprint& fingerprint, int world_size,
      int64_t max_result_bytes);

  // A piece of the result the reduction finished, in the tensor's dtype.
  struct FinishedChunk {
    int tensor;
    int64_t offset;  // bytes into the tensor
    std::string data;
  };
  struct Added {
    // Finished result chunks, in (tensor, offset) order.
    std::vector<FinishedChunk> finished;
    // True when the chunk reached elements no other rank had folded yet
    // (the rank is ahead and made the window grow); false when it only
    // folded into elements others had started (the rank is behind).
    bool ahead = false;
  };

  // Add folds `rank`'s next `size` bytes at `data`, which belong to tensor
  // `tensor` at byte `offset`, with `weight` (WEIGHTED_MEAN; ignored
  // otherwise; the same on every call of a rank). The chunk must be the
  // rank's next one: right after its previous chunk, or at offset 0 of a
  // later tensor when every tensor in between is empty and the previous one
  // is complete; within the tensor; and `rank` a contributor. Anything else
  // is an INTERNAL error (the caller validates uploads with ChunkSequence
  // first) and changes nothing.
  absl::StatusOr<Added> Add(int rank, double weight, int tensor, int64_t offset,
                            const uint8_t* data, int64_t size);

  // CloseContributors says that only the ranks with contributors[rank] set
  // (a quorum) will add from now on, and returns the chunks this finishes,
  // in (tensor, offset) order. The caller guarantees that no other rank
  // added anything.
  std::vector<FinishedChunk> CloseContributors(
      const std::vector<bool>& contributors);

  // HeldBytes is the accumulator memory held now, with the bytes of
  // elements cut in two that wait for their rest.
  int64_t HeldBytes() const { return held_bytes_; }

 private:
  // One rank's upload position.
  struct Cursor {
    int tensor = 0;     // the tensor its next chunk goes to
    int64_t bytes = 0;  // bytes of that tensor it has sent
    std::string carry;  // the first bytes of an element cut in two
    double weight = 1;  // its WEIGHTED_MEAN weight
    bool contributor = true;
  };
  // One tensor's accumulators, in the accumulation type, in blocks of
  // kBlockElements elements: the blocks from first_block on hold elements
  // [first_block * kBlockElements, frontier). Elements before `emitted`
  // were handed out; a block is freed once all of it was.
  struct Window {
    int64_t first_block = 0;
    int64_t emitted = 0;
    int64_t frontier = 0;  // elements [0, frontier) were folded by a rank
    std::deque<std::vector<uint8_t>> blocks;
  };
  static constexpr int64_t kBlockElements = 16384;

  Reducer(v1::ReduceOp op, const Fingerprint& fingerprint, int world_size,
          int64_t max_result_bytes);

  // CheckNext is OK when (tensor, offset, size) is `cursor`'s next chunk.
  absl::Status CheckNext(int rank, const Cursor& cursor, int tensor,
                         int64_t offset, int64_t size) const;
  // FoldElements folds `count` whole elements at `data`, the rank's
  // elements from `first` on, into `tensor`'s window; true when it grew
  // the window.
  bool FoldElements(int tensor, int64_t first, int64_t count, double weight,
                    const uint8_t* data);
  // Accumulator is where element `element` of `tensor`'s window lives; it
  // and the next elements of its block, `*run` of them, are contiguous.
  uint8_t* Accumulator(int tensor, int64_t element, int64_t* run);
  // FoldedBy is how many whole elements of `tensor` the rank has folded.
  int64_t FoldedBy(const Cursor& cursor, int tensor) const;
  // Emit hands out `tensor`'s finished elements: in chunks of
  // max_result_bytes, and the rest once the tensor is finished.
  void Emit(int tensor, std::vector<FinishedChunk>* out);

  const v1::ReduceOp op_;
  const Fingerprint fingerprint_;
  const int64_t max_result_bytes_;
  std::vector<int64_t> elements_;  // by tensor
  std::vector<Cursor> cursors_;    // by rank
  std::vector<Window> windows_;    // by tensor
  int64_t held_bytes_ = 0;
};

// ReduceOpName returns the wire name of a reduction, e.g. "WEIGHTED_MEAN".
std::string ReduceOpName(v1::ReduceOp op);

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_RELAY_REDUCER_H_
