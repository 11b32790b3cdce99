#include "common/content_hasher.h"

#include <algorithm>
#include <string>
#include <utility>
#include <variant>

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
      return absl::InvalidArgumentError(absl::StrCat(
          where, " names digest algorithm ", static_cast<int>(value),
          ", which this fedgather does not know (1: SHA-256, "
          "2: BLAKE3)"));
  }
}

namespace {

// BLAKE3 hashes its 1 KiB chunks many at a time (16 at once with AVX-512)
// only where one update hands it whole runs of chunks that start on a
// multiple of the run's length in the stream. Receivers see pieces of any
// size at any offset (gRPC slices, where a chunk's payload starts after its
// frame's header): fed as they come, 16 KiB pieces off the chunk grid hash
// at 40% of BLAKE3's speed and 4 KiB ones at 20% (bench/digest_benchmark).
// So the hasher stages what it is given into runs of kBlake3Run bytes and
// hands BLAKE3 only whole runs until Finish; a piece that covers whole runs
// goes through without a copy. The staging memory grows with what is staged
// (a client holds one hasher per rank, and a contribution may be a few
// bytes), up to one run.
constexpr size_t kBlake3Run = size_t{16} << 10;

// BLAKE3 over runs of kBlake3Run bytes, as above.
class Blake3Stream {
 public:
  Blake3Stream() { blake3_hasher_init(&hasher_); }

  void Update(const char* data, size_t size) {
    if (!run_.empty()) {
      const size_t take = std::min(size, kBlake3Run - run_.size());
      run_.append(data, take);
      data += take;
      size -= take;
      if (run_.size() < kBlake3Run) return;
      blake3_hasher_update(&hasher_, run_.data(), run_.size());
      run_.clear();
    }
    const size_t whole = size - size % kBlake3Run;
    if (whole > 0) blake3_hasher_update(&hasher_, data, whole);
    run_.append(data + whole, size - whole);
  }

  Digest Finish() {
    blake3_hasher_update(&hasher_, run_.data(), run_.size());
    run_.clear();
    Digest digest{};
    blake3_hasher_finalize(&hasher_, digest.data(), digest.size());
    return digest;
  }

 private:
  blake3_hasher hasher_;
  std::string run_;  // the bytes of the current run not yet handed over
};

using Hash = std::variant<Sha256, Blake3Stream>;

Hash NewHash(DigestAlgorithm algorithm) {
  if (algorithm == DigestAlgorithm::kBlake3) return Blake3Stream();
  return Sha256();
}

}  // namespace

// The live hash; which one it is, is the algorithm.
struct ContentHasher::State {
  Hash hash;
};

ContentHasher::ContentHasher(DigestAlgorithm algorithm)
    : state_(std::make_unique<State>(State{NewHash(algorithm)})) {}

ContentHasher::~ContentHasher() = default;
ContentHasher::ContentHasher(ContentHasher&& other) noexcept = default;
ContentHasher& ContentHasher::operator=(ContentHasher&& other) noexcept =
    default;

DigestAlgorithm ContentHasher::algorithm() const {
  return std::holds_alternative<Sha256>(state_->hash)
             ? DigestAlgorithm::kSha256
             : DigestAlgorithm::kBlake3;
}

void ContentHasher::Update(const void* data, size_t size) {
  if (size == 0) return;
  if (Sha256* sha256 = std::get_if<Sha256>(&state_->hash)) {
    sha256->Update(data, size);
  } else {
    std::get<Blake3Stream>(state_->hash)
        .Update(static_cast<const char*>(data), size);
  }
}

Digest ContentHasher::Finish() {
  return std::visit([](auto& hash) { return hash.Finish(); }, state_->hash);
}

Digest HashContent(DigestAlgorithm algorithm, const void* data, size_t size) {
  ContentHasher hasher(algorithm);
  hasher.Update(data, size);
  return hasher.Finish();
}

}  // namespace fedgather
