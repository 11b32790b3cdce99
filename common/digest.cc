#include "common/digest.h"

#include <cstring>

#include "absl/strings/escaping.h"

namespace fedgather {

std::string DigestToHex(const Digest& digest) {
  return absl::BytesToHexString(DigestBytes(digest));
}

std::string DigestBytes(const Digest& digest) {
  return std::string(reinterpret_cast<const char*>(digest.data()),
                     digest.size());
}

bool DigestFromBytes(absl::string_view bytes, Digest* digest) {
  if (bytes.size() != digest->size()) return false;
  std::memcpy(digest->data(), bytes.data(), bytes.size());
  return true;
}

}  // namespace fedgather
