// Strict safetensors reading and writing (https://github.com/huggingface/
// safetensors): an 8-byte little-endian header length, a JSON header mapping
// each tensor name to {dtype, shape, data_offsets} plus optional
// "__metadata__" (string -> string), then the data buffer.
#ifndef FEDGATHER_COMMON_SAFETENSORS_H_
#define FEDGATHER_COMMON_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/tensor_spec.h"

namespace fedgather {

inline constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t{100} << 20;

// One tensor of a parsed file: its spec and a view of its bytes.
struct SafetensorsEntry {
  TensorSpec spec;
  absl::Span<const uint8_t> data;
};

class SafetensorsFile {
 public:
  // Parse validates `bytes` (a whole file) and takes ownership of it. Every
  // failure is INVALID_ARGUMENT starting with `source_name` and naming the
  // problem and the tensor: a short file, a header length beyond the file or
  // kMaxSafetensorsHeaderBytes, JSON that is not an object, duplicate names,
  // missing, mistyped or unknown entry fields, unsupported dtypes, negative
  // dims, offsets that overflow, overlap, leave holes or do not match the
  // spec's size, and bytes after the last tensor.
  static absl::StatusOr<SafetensorsFile> Parse(std::string bytes,
                                               absl::string_view source_name);

  // ReadFile reads and parses `path`; file errors name the path.
  static absl::StatusOr<SafetensorsFile> ReadFile(const std::string& path);

  // tensors() in ascending name order; the views stay valid while this
  // object lives, also after it is moved.
  const std::vector<SafetensorsEntry>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }
  // Views returns ConstHostTensor views of tensors(), in the same order.
  std::vector<ConstHostTensor> Views() const;

 private:
  SafetensorsFile() = default;

  std::unique_ptr<std::string> bytes_;
  std::vector<SafetensorsEntry> tensors_;
  std::map<std::string, std::string> metadata_;
};

// SerializeSafetensors encodes `tensors` in the given order; names must be
// unique and non-empty (INVALID_ARGUMENT otherwise). The header is padded
// with spaces to a multiple of 8 bytes.
absl::StatusOr<std::string> SerializeSafetensors(
    absl::Span<const ConstHostTensor> tensors,
    const std::map<std::string, std::string>& metadata);

// WriteSafetensorsFile serializes and writes `path` atomically.
absl::Status WriteSafetensorsFile(
    const std::string& path, absl::Span<const ConstHostTensor> tensors,
    const std::map<std::string, std::string>& metadata);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_SAFETENSORS_H_
