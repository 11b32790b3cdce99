#include "common/content_hasher.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "blake3.h"
#include "common/sha256.h"

namespace fedgather {

std::string DigestAlgorithmName(DigestAlgorithm algorithm) {
  switch (algorithm) {
    case DigestAlgorithm::kSha256:
      return "sha256";
    case DigestAlgorithm::kBlake3:
      return "blake3";
  }
  return "unknown";
}

std::optional<DigestAlgorithm> ParseDigestAlgorithm(absl::string_view name) {
  if (name == "sha256") return DigestAlgorithm::kSha256;
  if (name == "blake3") return DigestAlgorithm::kBlake3;
  return std::nullopt;
}

v1::DigestAlgorithm DigestAlgorithmToProto(DigestAlgorithm algorithm) {
  return algorithm == DigestAlgorithm::kBlake3 ? v1::DIGEST_BLAKE3
                                               : v1::DIGEST_SHA256;
}

absl::StatusOr<DigestAlgorithm> DigestAlgorithmFromProto(
    v1::DigestAlgorithm value, absl::string_view where) {
  switch (value) {
    case v1::DIGEST_ALGORITHM_UNSPECIFIED:
    case v1::DIGEST_SHA256:
      return DigestAlgorithm::kSha256;
    case v1::DIGEST_BLAKE3:
      return DigestAlgorithm::kBlake3;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(where, " names digest algorithm ",
                       static_cast<int>(value),
                       ", which this server does not know (1: SHA-256, "
                       "2: BLAKE3)"));
  }
}

// One of the two is live, as algorithm_ says.
struct ContentHasher::State {
  std::optional<Sha256> sha256;
  blake3_hasher blake3;
};

ContentHasher::ContentHasher(DigestAlgorithm algorithm)
    : algorithm_(algorithm), state_(std::make_unique<State>()) {
  if (algorithm_ == DigestAlgorithm::kSha256) {
    state_->sha256.emplace();
  } else {
    blake3_hasher_init(&state_->blake3);
  }
}

ContentHasher::~ContentHasher() = default;
ContentHasher::ContentHasher(ContentHasher&& other) noexcept = default;
ContentHasher& ContentHasher::operator=(ContentHasher&& other) noexcept =
    default;

void ContentHasher::Update(const void* data, size_t size) {
  if (size == 0) return;
  if (algorithm_ == DigestAlgorithm::kSha256) {
    state_->sha256->Update(data, size);
  } else {
    blake3_hasher_update(&state_->blake3, data, size);
  }
}

Digest ContentHasher::Finish() {
  if (algorithm_ == DigestAlgorithm::kSha256) return state_->sha256->Finish();
  Digest digest{};
  blake3_hasher_finalize(&state_->blake3, digest.data(), digest.size());
  return digest;
}

Digest HashContent(DigestAlgorithm algorithm, const void* data, size_t size) {
  ContentHasher hasher(algorithm);
  hasher.Update(data, size);
  return hasher.Finish();
}

}  // namespace fedgather
