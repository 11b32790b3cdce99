#include "common/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/escaping.h"

namespace fedgather {

struct Sha256::State {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : state_(new State) {
  state_->ctx = EVP_MD_CTX_new();
  // Allocation or init failure of a built-in digest is a broken process, not
  // an input error.
  if (state_->ctx == nullptr ||
      EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr) != 1) {
    std::abort();
  }
}

Sha256::~Sha256() {
  if (state_ != nullptr) {
    EVP_MD_CTX_free(state_->ctx);
    delete state_;
  }
}

Sha256::Sha256(Sha256&& other) noexcept : state_(other.state_) {
  other.state_ = nullptr;
}

Sha256& Sha256::operator=(Sha256&& other) noexcept {
  std::swap(state_, other.state_);
  return *this;
}

void Sha256::Update(const void* data, size_t size) {
  if (size > 0) EVP_DigestUpdate(state_->ctx, data, size);
}

Sha256Digest Sha256::Finish() {
  Sha256Digest digest{};
  unsigned int length = 0;
  EVP_DigestFinal_ex(state_->ctx, digest.data(), &length);
  return digest;
}

std::string DigestToHex(const Sha256Digest& digest) {
  return absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(digest.data()), digest.size()));
}

bool DigestFromBytes(absl::string_view bytes, Sha256Digest* digest) {
  if (bytes.size() != digest->size()) return false;
  std::memcpy(digest->data(), bytes.data(), bytes.size());
  return true;
}

}  // namespace fedgather
