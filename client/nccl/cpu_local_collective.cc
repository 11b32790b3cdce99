#include "client/nccl/cpu_local_collective.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace fedgather {

CpuLocalCollective::CpuLocalCollective(int devices) : devices_(devices) {}

CpuLocalCollective::~CpuLocalCollective() = default;

absl::StatusOr<LocalBuffer> CpuLocalCollective::Allocate(int device,
                                                         int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot allocate ", bytes, " bytes"));
  }
  // At least one byte, so every buffer has its own address.
  void* data = std::malloc(static_cast<size_t>(bytes > 0 ? bytes : 1));
  if (data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes of host memory"));
  }
  {
    absl::MutexLock lock(&mu_);
    allocations_[reinterpret_cast<uintptr_t>(data)] = {device, bytes};
  }
  return LocalBuffer(device, data, bytes, [this](void* p) {
    {
      absl::MutexLock lock(&mu_);
      allocations_.erase(reinterpret_cast<uintptr_t>(p));
    }
    std::free(p);
  });
}

absl::StatusOr<LocalBuffer> CpuLocalCollective::AllocateDevice(int device,
                                                               int64_t bytes) {
  if (device < 0 || device >= devices_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", device, " is not one of the ", devices_, " local devices"));
  }
  return Allocate(device, bytes);
}

absl::StatusOr<LocalBuffer> CpuLocalCollective::AllocateHost(int64_t bytes) {
  return Allocate(LocalBuffer::kHost, bytes);
}

absl::Status CpuLocalCollective::CheckDevice(int device, const void* data,
                                             int64_t bytes,
                                             const char* what) const {
  if (device < 0 || device >= devices_) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": device ", device,
                                                   " is not one of the ",
                                                   devices_, " local devices"));
  }
  if (bytes == 0) return absl::OkStatus();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  absl::MutexLock lock(&mu_);
  auto it = allocations_.upper_bound(begin);
  if (it != allocations_.begin()) {
    --it;
    const Allocation& a = it->second;
    if (a.device == device && begin + bytes <= it->first + a.bytes) {
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %d bytes at %p are not memory of device %d", what,
                      bytes, data, device));
}

absl::Status CpuLocalCollective::CheckHost(const void* data, int64_t bytes,
                                           const char* what) const {
  if (bytes == 0) return absl::OkStatus();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  absl::MutexLock lock(&mu_);
  // Host memory may be any memory but a device's.
  for (auto it = allocations_.begin(); it != allocations_.end(); ++it) {
    const uintptr_t a_begin = it->first;
    const uintptr_t a_end = a_begin + it->second.bytes;
    if (it->second.device != LocalBuffer::kHost && begin < a_end &&
        a_begin < begin + bytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: host range %p (%d bytes) is memory of device %d",
                          what, data, bytes, it->second.device));
    }
  }
  return absl::OkStatus();
}

absl::Status CpuLocalCollective::Copy(int device, void* dst, const void* src,
                                      int64_t bytes, bool to_device) {
  const char* what = to_device ? "copy to device" : "copy to host";
  FG_RETURN_IF_ERROR(CheckDevice(device, to_device ? dst : src, bytes, what));
  FG_RETURN_IF_ERROR(CheckHost(to_device ? src : dst, bytes, what));
  absl::MutexLock lock(&mu_);
  std::vector<int64_t>& moved =
      to_device ? stats_.host_to_device_bytes : stats_.device_to_host_bytes;
  moved.resize(devices_);
  moved[device] += bytes;
  auto copy = [dst, src, bytes] {
    if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
  };
  pending_.push_back({device, std::move(copy)});
  return absl::OkStatus();
}

absl::Status CpuLocalCollective::CopyToDevice(int device, void* dst,
                                              const void* src, int64_t bytes) {
  return Copy(device, dst, src, bytes, /*to_device=*/true);
}

absl::Status CpuLocalCollective::CopyToHost(int device, void* dst,
                                            const void* src, int64_t bytes) {
  return Copy(device, dst, src, bytes, /*to_device=*/false);
}

absl::Status CpuLocalCollective::AllGather(
    absl::Span<const LocalAllGather> ops) {
  for (const LocalAllGather& op : ops) {
    FG_RETURN_IF_ERROR(CheckLocalAllGather(*this, op));
    for (int g = 0; g < devices_; ++g) {
      FG_RETURN_IF_ERROR(
          CheckDevice(g, op.sends[g], op.bytes, "all_gather send"));
      FG_RETURN_IF_ERROR(CheckDevice(g, op.recvs[g], op.bytes * devices_,
                                     "all_gather receive"));
    }
  }
  absl::MutexLock lock(&mu_);
  for (const LocalAllGather& op : ops) {
    if (op.bytes == 0) continue;  // as NCCL: no work, no wait
    ++stats_.all_gathers;
    auto gather = [op, devices = devices_] {
      for (int d = 0; d < devices; ++d) {
        for (int g = 0; g < devices; ++g) {
          uint8_t* to = static_cast<uint8_t*>(op.recvs[d]) + g * op.bytes;
          if (to != op.sends[g]) {
            std::memcpy(to, op.sends[g], static_cast<size_t>(op.bytes));
          }
        }
      }
    };
    pending_.push_back({kEveryDevice, std::move(gather)});
  }
  return absl::OkStatus();
}

absl::Status CpuLocalCollective::Synchronize() {
  std::vector<Step> work;
  {
    absl::MutexLock lock(&mu_);
    work.swap(pending_);
  }
  // The devices' streams between two all_gathers, highest device first
  // (the header says why).
  auto run_streams = [&](size_t begin, size_t end) {
    for (int d = devices_ - 1; d >= 0; --d) {
      for (size_t i = begin; i < end; ++i) {
        if (work[i].device == d) work[i].run();
      }
    }
  };
  size_t begin = 0;
  for (size_t i = 0; i < work.size(); ++i) {
    if (work[i].device != kEveryDevice) continue;
    run_streams(begin, i);
    work[i].run();
    begin = i + 1;
  }
  run_streams(begin, work.size());
  return absl::OkStatus();
}

LocalTransferStats CpuLocalCollective::stats() const {
  absl::MutexLock lock(&mu_);
  LocalTransferStats stats = stats_;
  stats.host_to_device_bytes.resize(devices_);
  stats.device_to_host_bytes.resize(devices_);
  return stats;
}

}  // namespace fedgather
