// Incremental SHA-256, used for contribution digests on both ends of a round.
#ifndef FEDGATHER_COMMON_SHA256_H_
#define FEDGATHER_COMMON_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace fedgather {

using Sha256Digest = std::array<uint8_t, 32>;

// Sha256 hashes bytes fed in any number of Update calls. Not thread-safe;
// movable. Finish may be called once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&& other) noexcept;
  Sha256& operator=(Sha256&& other) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(const void* data, size_t size);
  Sha256Digest Finish();

 private:
  struct State;
  State* state_;
};

// DigestToHex renders a digest as 64 lowercase hex characters.
std::string DigestToHex(const Sha256Digest& digest);

// DigestFromBytes copies a 32-byte string into a digest; false on bad length.
bool DigestFromBytes(absl::string_view bytes, Sha256Digest* digest);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_SHA256_H_
