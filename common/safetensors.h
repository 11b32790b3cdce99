// Strict reading and writing of safetensors files
// (https://github.com/huggingface/safetensors).
//
// Layout: an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON, then the
// data buffer. The JSON object maps each tensor name to
// {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} (offsets into
// the data buffer) and may hold "__metadata__": {string: string}.
//
// The parser accepts only files whose tensors tile the data buffer exactly, as
// the reference implementation requires; everything else is INVALID_ARGUMENT.
// None of these functions keep global state; all are safe to call from any
// thread on distinct objects.
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

// The largest JSON header Parse accepts, as the reference implementation.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100 * 1024 * 1024;

// The reserved top-level key of the header that holds string metadata.
inline constexpr absl::string_view kSafetensorsMetadataKey = "__metadata__";

// One tensor of a parsed file: its spec and a view of its bytes inside the
// file's buffer. `data.size()` equals ByteSize(spec).
struct SafetensorsEntry {
  TensorSpec spec;
  absl::Span<const uint8_t> data;
};

// A parsed safetensors file that owns its bytes. Move-only; moving keeps every
// view (tensors()[i].data, Views()[i].data) valid. Immutable after Parse, so
// concurrent const calls are safe.
class SafetensorsFile {
 public:
  SafetensorsFile(SafetensorsFile&&) = default;
  SafetensorsFile& operator=(SafetensorsFile&&) = default;

  // Parse validates `bytes`, the whole file, and takes ownership of it. Every
  // failure is INVALID_ARGUMENT whose message starts with "`source_name`: "
  // and names the problem and, where there is one, the tensor. Zero tensors
  // is valid; 0-element tensors are valid with begin == end.
  static absl::StatusOr<SafetensorsFile> Parse(std::string bytes,
                                               absl::string_view source_name);

  // ReadFile reads `path` whole (blocking) and parses it with `path` as the
  // source name. OS errors follow errno (NOT_FOUND, PERMISSION_DENIED, ...;
  // INVALID_ARGUMENT for a directory) and name the path.
  static absl::StatusOr<SafetensorsFile> ReadFile(const std::string& path);

  // tensors returns the tensors in ascending (bytewise) name order.
  const std::vector<SafetensorsEntry>& tensors() const { return tensors_; }

  // metadata returns the "__metadata__" map, empty when the file had none.
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }

  // Views returns ConstHostTensor views of tensors(), in the same order. They
  // point into this object's buffer and do not outlive it.
  std::vector<ConstHostTensor> Views() const;

 private:
  SafetensorsFile() = default;

  // Heap-held so that views into it survive moves of this object.
  std::unique_ptr<const std::string> bytes_;
  std::vector<SafetensorsEntry> tensors_;
  std::map<std::string, std::string> metadata_;
};

// SerializeSafetensors returns the file holding `tensors`, their data laid out
// back to back in the given order, and `metadata` (omitted when empty). The
// JSON header is padded with spaces to a multiple of 8 bytes. INVALID_ARGUMENT
// when a name is empty, duplicate, "__metadata__", longer than
// kMaxTensorNameBytes or not UTF-8, when a spec has no valid ByteSize, when a
// non-empty tensor has null data, or when metadata is not UTF-8;
// RESOURCE_EXHAUSTED when the file would not fit in memory (size_t).
absl::StatusOr<std::string> SerializeSafetensors(
    absl::Span<const ConstHostTensor> tensors,
    const std::map<std::string, std::string>& metadata);

// WriteSafetensorsFile writes what SerializeSafetensors produces to `path`
// with WritePiecesToFile (common/file_io.h): a temporary file in the same
// directory, then a rename, so readers never see a partial file. Blocks. The
// tensor bytes are written from the views, not copied first. Validation errors
// as SerializeSafetensors, with the message prefixed by "`path`: "; nothing is
// written then. I/O errors follow errno (NOT_FOUND, PERMISSION_DENIED,
// RESOURCE_EXHAUSTED, else INTERNAL) and name the path.
absl::Status WriteSafetensorsFile(
    const std::string& path, absl::Span<const ConstHostTensor> tensors,
    const std::map<std::string, std::string>& metadata);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_SAFETENSORS_H_
