// TensorSpec: the (name, dtype, shape) of one tensor, and HostTensor views of
// raw host memory described by a spec. A contribution's fingerprint is the
// ordered list of its specs.
#ifndef FEDGATHER_COMMON_TENSOR_SPEC_H_
#define FEDGATHER_COMMON_TENSOR_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/dtype.h"

namespace fedgather {

struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;

  bool operator==(const TensorSpec& other) const {
    return name == other.name && dtype == other.dtype && shape == other.shape;
  }
  bool operator!=(const TensorSpec& other) const { return !(*this == other); }
};

// Limits on what a spec may describe; they bound parsing of untrusted input.
inline constexpr int kMaxTensorRank = 32;
inline constexpr size_t kMaxTensorNameBytes = 1024;

// NumElements returns the product of `shape`, or INVALID_ARGUMENT when a
// dimension is negative or the product overflows int64.
absl::StatusOr<int64_t> NumElements(absl::Span<const int64_t> shape);

// ByteSize returns numel * element size of `spec`, or INVALID_ARGUMENT (naming
// the tensor) when the shape is invalid, the rank exceeds kMaxTensorRank, or
// the size overflows int64.
absl::StatusOr<int64_t> ByteSize(const TensorSpec& spec);

// ShapeToString renders a shape as "[2, 3]".
std::string ShapeToString(absl::Span<const int64_t> shape);

// SpecToString renders a spec as "name:F32[2, 3]".
std::string SpecToString(const TensorSpec& spec);

// A read-only view of one host tensor's contiguous bytes. Does not own memory.
struct ConstHostTensor {
  TensorSpec spec;
  const void* data = nullptr;
};

// A writable view of one host tensor's contiguous bytes. Does not own memory.
struct MutableHostTensor {
  TensorSpec spec;
  void* data = nullptr;
};

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_TENSOR_SPEC_H_
