// libFuzzer target: the safetensors parser (common/safetensors.h), which
// reads the files `fedgather join` is given. Any input must parse or be
// refused; a parsed file's tensors must lie inside it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<fedgather::SafetensorsFile> file =
      fedgather::SafetensorsFile::Parse(
          std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!file.ok()) return 0;
  uint64_t sum = 0;
  for (const fedgather::ConstHostTensor& view : file->Views()) {
    const absl::StatusOr<int64_t> bytes = fedgather::ByteSize(view.spec);
    if (!bytes.ok()) __builtin_trap();  // accepted a tensor with no size
    const auto* p = static_cast<const uint8_t*>(view.data);
    for (int64_t i = 0; i < *bytes; ++i) sum += p[i];  // ASan: inside?
  }
  return static_cast<int>(sum & 0);
}
