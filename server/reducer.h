// Reducer: the element-wise reduction of one ALL_REDUCE round, chunk by
// chunk, as the ranks' chunks arrive. Every rank cuts its contribution into
// the same chunks (same fingerprint, same chunk limit, tensors in order, each
// from offset 0), so a chunk is identified by (tensor, offset). The reducer
// keeps one accumulator per chunk that some but not all ranks have sent;
// when the last rank's copy arrives the chunk is finished, converted back to
// the tensor's dtype and handed out, and its accumulator is freed. Memory is
// therefore proportional to the chunks in flight between the fastest and
// the slowest rank, never to the world size times the contribution.
//
// Accumulation: F32, F16 and BF16 in fp32; F64 in fp64; integers exactly in
// 64 bits (a sum then wraps to the tensor's type, as the same sum in that
// type would). MEAN and WEIGHTED_MEAN take floating tensors only; BOOL
// cannot be reduced. Floating results depend on the order in which ranks'
// chunks arrive only through fp32 (fp64) rounding.
//
// Not thread-safe: the round calls it under its lock.
#ifndef FEDGATHER_SERVER_REDUCER_H_
#define FEDGATHER_SERVER_REDUCER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/fingerprint.h"
#include "fedgather/v1/fedgather.pb.h"

namespace fedgather::server {

class Reducer {
 public:
  // Create checks that `op` can reduce every tensor of `fingerprint`
  // (CheckReducible): INVALID_ARGUMENT naming the tensor and its dtype
  // otherwise, or for an unspecified op.
  static absl::StatusOr<std::unique_ptr<Reducer>> Create(
      v1::ReduceOp op, const Fingerprint& fingerprint, int world_size);

  // Add folds `rank`'s copy of the chunk (`tensor`, `offset`) of `size`
  // bytes at `data` in, with `weight` (WEIGHTED_MEAN; ignored otherwise).
  // The caller guarantees that the chunk lies within the tensor, ends on an
  // element boundary (ChunkSequence and equal chunk limits), and that each
  // rank adds each chunk once. Returns the finished chunk, in the tensor's
  // dtype, when this was the last copy it needs (the world size, or the
  // contributors after CloseContributors); nullopt otherwise.
  std::optional<std::string> Add(int rank, double weight, int tensor,
                                 int64_t offset, const uint8_t* data,
                                 int64_t size);

  // A chunk the reduction finished.
  struct FinishedChunk {
    int tensor;
    int64_t offset;
    std::string data;  // in the tensor's dtype
  };
  // CloseContributors says that only `contributors` ranks (fewer than the
  // world size: a quorum) will add chunks from now on, and returns the
  // chunks that this finishes, in (tensor, offset) order. The caller
  // guarantees that the ranks that stay are the only ones that added any.
  std::vector<FinishedChunk> CloseContributors(int contributors);

  // HeldBytes is the accumulator memory held now.
  int64_t HeldBytes() const { return held_bytes_; }

 private:
  struct Partial {
    std::vector<uint8_t> accumulator;  // elements of the accumulation type
    int count = 0;                     // ranks folded in
    double weight = 0;                 // sum of their weights
  };

  Reducer(v1::ReduceOp op, const Fingerprint& fingerprint, int world_size)
      : op_(op), fingerprint_(fingerprint), contributors_(world_size) {}

  // Finish converts the finished `partial` of chunk (tensor, offset)
  // and frees it.
  std::string Finish(int tensor, int64_t offset, Partial& partial);

  const v1::ReduceOp op_;
  const Fingerprint fingerprint_;
  int contributors_;  // the ranks a chunk needs to be finished
  std::map<std::pair<int, int64_t>, Partial> partials_;  // in chunk order
  int64_t held_bytes_ = 0;
};

// ReduceOpName returns the wire name of a reduction, e.g. "WEIGHTED_MEAN".
std::string ReduceOpName(v1::ReduceOp op);

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_REDUCER_H_
