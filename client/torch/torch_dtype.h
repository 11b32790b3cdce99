// The mapping between LibTorch's scalar types and fedgather's dtypes, for
// the torch adapters (fg_client_torch and the Python module).
#ifndef FEDGATHER_CLIENT_TORCH_TORCH_DTYPE_H_
#define FEDGATHER_CLIENT_TORCH_TORCH_DTYPE_H_

#include <c10/core/ScalarType.h>

#include "absl/status/statusor.h"
#include "common/dtype.h"

namespace at {
class Tensor;
}  // namespace at

namespace fedgather {

// DTypeOf is the dtype of `tensor`; INVALID_ARGUMENT naming the scalar type
// for one fedgather does not carry (complex, quantized, ...).
absl::StatusOr<DType> DTypeOf(const at::Tensor& tensor);

// ScalarTypeOf is the LibTorch scalar type of `dtype`.
at::ScalarType ScalarTypeOf(DType dtype);

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_TORCH_TORCH_DTYPE_H_
