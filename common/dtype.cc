#include "common/dtype.h"

#include <array>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fedgather {
namespace {

struct DTypeInfo {
  DType dtype;
  absl::string_view name;
  size_t size;
};

constexpr std::array<DTypeInfo, 10> kDTypes = {{
    {DType::kF32, "F32", 4},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kF64, "F64", 8},
    {DType::kI64, "I64", 8},
    {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},
    {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
}};

const DTypeInfo& Info(DType dtype) {
  // Enum values are 1..10 in table order.
  return kDTypes[static_cast<int>(dtype) - 1];
}

}  // namespace

size_t DTypeSize(DType dtype) { return Info(dtype).size; }

absl::string_view DTypeName(DType dtype) { return Info(dtype).name; }

absl::StatusOr<DType> DTypeFromName(absl::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported dtype \"", name,
      "\" (supported: F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL)"));
}

absl::StatusOr<DType> DTypeFromWire(int value) {
  if (value < 1 || value > static_cast<int>(kDTypes.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype enum value ", value));
  }
  return static_cast<DType>(value);
}

}  // namespace fedgather
