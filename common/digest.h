// Digest: a 32-byte hash value, whatever algorithm made it (SHA-256 and
// BLAKE3 both give 32 bytes here), with its hex and wire forms. The
// algorithm travels beside it (common/content_hasher.h), never guessed from
// the bytes.
#ifndef FEDGATHER_COMMON_DIGEST_H_
#define FEDGATHER_COMMON_DIGEST_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace fedgather {

using Digest = std::array<uint8_t, 32>;

// DigestToHex renders a digest as 64 lowercase hex characters.
std::string DigestToHex(const Digest& digest);

// DigestBytes is a digest as the 32-byte string a proto field holds.
std::string DigestBytes(const Digest& digest);

// DigestFromBytes copies a 32-byte string into a digest; false on bad length.
bool DigestFromBytes(absl::string_view bytes, Digest* digest);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_DIGEST_H_
