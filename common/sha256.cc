#include "common/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>
#include <utility>

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

Digest Sha256::Finish() {
  Digest digest{};
  unsigned int length = 0;
  EVP_DigestFinal_ex(state_->ctx, digest.data(), &length);
  return digest;
}

}  // namespace fedgather
