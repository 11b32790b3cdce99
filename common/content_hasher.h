// ContentHasher: the hash that names a contribution's bytes (a rank's
// upload, an all_reduce result), in the algorithm its group's policy chose
// for the epoch: BLAKE3 (the default) or SHA-256. Both give a 32-byte Digest;
// the algorithm is always stated beside it (the protocol's DigestAlgorithm
// fields, the audit records' digest_algorithm, the journal's records), never
// guessed from the bytes. docs/security.md says what these digests do and do
// not guarantee; docs/decisions.md why BLAKE3 is the default.
#ifndef FEDGATHER_COMMON_CONTENT_HASHER_H_
#define FEDGATHER_COMMON_CONTENT_HASHER_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/digest.h"
#include "fedgather/v1/fedgather.pb.h"

namespace fedgather {

// The values are the protocol's DigestAlgorithm numbers.
enum class DigestAlgorithm { kSha256 = 1, kBlake3 = 2 };

// The name of an algorithm in policies, audit records and messages:
// "sha256" or "blake3".
std::string DigestAlgorithmName(DigestAlgorithm algorithm);

// ParseDigestAlgorithm reads a name DigestAlgorithmName gives; nullopt for
// any other.
std::optional<DigestAlgorithm> ParseDigestAlgorithm(absl::string_view name);

// DigestAlgorithmToProto gives the wire value (never UNSPECIFIED).
v1::DigestAlgorithm DigestAlgorithmToProto(DigestAlgorithm algorithm);

// DigestAlgorithmFromProto reads a wire value: UNSPECIFIED is SHA-256 (what
// a digest meant before the field existed). INVALID_ARGUMENT, naming
// `where`, for a number this build does not know.
absl::StatusOr<DigestAlgorithm> DigestAlgorithmFromProto(
    v1::DigestAlgorithm value, absl::string_view where);

// ContentHasher hashes bytes fed in any number of Update calls. Not
// thread-safe; movable (a moved-from hasher may only be destroyed or
// assigned). Finish may be called once.
class ContentHasher {
 public:
  explicit ContentHasher(DigestAlgorithm algorithm);
  ~ContentHasher();
  ContentHasher(ContentHasher&& other) noexcept;
  ContentHasher& operator=(ContentHasher&& other) noexcept;
  ContentHasher(const ContentHasher&) = delete;
  ContentHasher& operator=(const ContentHasher&) = delete;

  void Update(const void* data, size_t size);
  Digest Finish();

  DigestAlgorithm algorithm() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// HashContent is the digest of `size` bytes at `data`, in one call.
Digest HashContent(DigestAlgorithm algorithm, const void* data, size_t size);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_CONTENT_HASHER_H_
