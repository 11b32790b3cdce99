#include "client/nccl/local_collective.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fedgather {

LocalBuffer::LocalBuffer(int device, void* data, int64_t bytes,
                         std::function<void(void*)> release)
    : device_(device),
      data_(data),
      bytes_(bytes),
      release_(std::move(release)) {}

LocalBuffer::LocalBuffer(LocalBuffer&& other) noexcept
    : device_(other.device_),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      release_(std::move(other.release_)) {
  other.release_ = nullptr;
}

LocalBuffer& LocalBuffer::operator=(LocalBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    device_ = other.device_;
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    release_ = std::move(other.release_);
    other.release_ = nullptr;
  }
  return *this;
}

LocalBuffer::~LocalBuffer() { Release(); }

void LocalBuffer::Release() {
  if (data_ != nullptr && release_) release_(data_);
  data_ = nullptr;
  release_ = nullptr;
}

absl::Status CheckLocalAllGather(const LocalCollective& local,
                                 const LocalAllGather& op) {
  const size_t g = static_cast<size_t>(local.device_count());
  if (op.sends.size() != g || op.recvs.size() != g) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a local all_gather over ", g, " devices got ", op.sends.size(),
        " send and ", op.recvs.size(), " receive buffers"));
  }
  if (op.bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a local all_gather of ", op.bytes, " bytes"));
  }
  if (op.bytes == 0) return absl::OkStatus();
  for (size_t d = 0; d < g; ++d) {
    const uintptr_t send = reinterpret_cast<uintptr_t>(op.sends[d]);
    const uintptr_t recv = reinterpret_cast<uintptr_t>(op.recvs[d]);
    const uintptr_t slot = recv + d * op.bytes;
    const uintptr_t recv_end = recv + g * op.bytes;
    if (send != slot && send < recv_end && recv < send + op.bytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a local all_gather of %d bytes on device %d: send buffer %p "
          "overlaps receive buffer %p (%d bytes) but is not its slot %p (in "
          "place); NCCL allows no other overlap",
          op.bytes, d, op.sends[d], op.recvs[d], g * op.bytes,
          reinterpret_cast<const void*>(slot)));
    }
  }
  return absl::OkStatus();
}

}  // namespace fedgather
