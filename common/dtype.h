// Element types that fedgather carries on the wire, and their properties.
// The names are the safetensors dtype names ("F32", "BF16", ...).
#ifndef FEDGATHER_COMMON_DTYPE_H_
#define FEDGATHER_COMMON_DTYPE_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fedgather {

// DType values equal the wire enum fedgather.v1.DType.
enum class DType : int {
  kF32 = 1,
  kF16 = 2,
  kBF16 = 3,
  kF64 = 4,
  kI64 = 5,
  kI32 = 6,
  kI16 = 7,
  kI8 = 8,
  kU8 = 9,
  kBool = 10,
};

// DTypeSize returns the size in bytes of one element of `dtype`.
size_t DTypeSize(DType dtype);

// DTypeName returns the safetensors name of `dtype`, such as "F32".
absl::string_view DTypeName(DType dtype);

// DTypeFromName parses a safetensors dtype name. INVALID_ARGUMENT names the
// unsupported value.
absl::StatusOr<DType> DTypeFromName(absl::string_view name);

// DTypeFromWire converts a wire enum value; INVALID_ARGUMENT when unknown.
absl::StatusOr<DType> DTypeFromWire(int value);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_DTYPE_H_
