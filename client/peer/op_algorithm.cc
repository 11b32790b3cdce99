#include "client/peer/op_algorithm.h"

#include <algorithm>

namespace fedgather {

OpAlgorithm ChooseOpAlgorithm(v1::Op op, absl::Span<const size_t> part_sizes) {
  size_t largest = 0;
  for (size_t size : part_sizes) largest = std::max(largest, size);
  const size_t bound =
      op == v1::ALL_REDUCE ? kLogStepMaxReduceBytes : kLogStepMaxPartBytes;
  return largest <= bound ? OpAlgorithm::kLogSteps : OpAlgorithm::kRing;
}

}  // namespace fedgather
