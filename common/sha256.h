// Incremental SHA-256 (OpenSSL): the audit chain's line hash, the policy's
// fingerprint, and one of the contribution digests (common/content_hasher.h).
#ifndef FEDGATHER_COMMON_SHA256_H_
#define FEDGATHER_COMMON_SHA256_H_

#include <cstddef>

#include "common/digest.h"

namespace fedgather {

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
  Digest Finish();

 private:
  struct State;
  State* state_;
};

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_SHA256_H_
