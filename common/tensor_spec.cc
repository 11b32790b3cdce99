#include "common/tensor_spec.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fedgather {

absl::StatusOr<int64_t> NumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t dim : shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension in shape ", ShapeToString(shape)));
    }
    if (dim != 0 && n > std::numeric_limits<int64_t>::max() / dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeToString(shape), " overflows int64"));
    }
    n *= dim;
  }
  return n;
}

absl::StatusOr<int64_t> ByteSize(const TensorSpec& spec) {
  if (spec.shape.size() > static_cast<size_t>(kMaxTensorRank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", spec.name, "' has rank ", spec.shape.size(),
                     ", above the limit of ", kMaxTensorRank));
  }
  absl::StatusOr<int64_t> numel = NumElements(spec.shape);
  if (!numel.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", spec.name, "': ", numel.status().message()));
  }
  const int64_t element = static_cast<int64_t>(DTypeSize(spec.dtype));
  if (*numel > std::numeric_limits<int64_t>::max() / element) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", spec.name, "' of shape ",
                     ShapeToString(spec.shape), " is too large"));
  }
  return *numel * element;
}

std::string ShapeToString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string SpecToString(const TensorSpec& spec) {
  return absl::StrCat(spec.name, ":", DTypeName(spec.dtype),
                      ShapeToString(spec.shape));
}

}  // namespace fedgather
