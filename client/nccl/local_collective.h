// LocalCollective: the G devices of one node (GPUs, or their emulation in
// host memory) as one process drives them: memory on each device, host
// memory the devices copy from and to, copies, and an all_gather across the
// devices. The hierarchical all_gather (hierarchical_all_gather.h) is written
// against this interface only, so the same composition runs on GPUs
// (NcclLocalCollective, fg_nccl_local) and in tests and on nodes without
// GPUs (CpuLocalCollective).
//
// Ordering: every device has one queue (a CUDA stream). Copies and
// all_gathers are enqueued and may run after the call returns; they run in
// the order they were enqueued on each device, an all_gather after the work
// enqueued before it on every device. Synchronize waits for all of it.
// Memory handed to an enqueued operation must stay valid and unchanged
// (sources) or untouched (destinations) until Synchronize returns.
//
// Thread safety: one thread at a time drives a LocalCollective.
#ifndef FEDGATHER_CLIENT_NCCL_LOCAL_COLLECTIVE_H_
#define FEDGATHER_CLIENT_NCCL_LOCAL_COLLECTIVE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor_spec.h"

namespace fedgather {

// LocalBuffer owns `bytes` of memory that a LocalCollective allocated: on
// local device `device()`, or host memory (`device()` == kHost). Move-only;
// its destructor gives the memory back. It must not outlive the collective
// that made it.
class LocalBuffer {
 public:
  static constexpr int kHost = -1;

  LocalBuffer() = default;
  LocalBuffer(int device, void* data, int64_t bytes,
              std::function<void(void*)> release);
  LocalBuffer(LocalBuffer&& other) noexcept;
  LocalBuffer& operator=(LocalBuffer&& other) noexcept;
  LocalBuffer(const LocalBuffer&) = delete;
  LocalBuffer& operator=(const LocalBuffer&) = delete;
  ~LocalBuffer();

  int device() const { return device_; }
  void* data() const { return data_; }
  uint8_t* bytes_data() const { return static_cast<uint8_t*>(data_); }
  int64_t bytes() const { return bytes_; }

 private:
  void Release();

  int device_ = kHost;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  std::function<void(void*)> release_;
};

// Views of one tensor in a local device's memory. They do not own memory.
struct ConstDeviceTensor {
  TensorSpec spec;
  const void* data = nullptr;
};
struct MutableDeviceTensor {
  TensorSpec spec;
  void* data = nullptr;
};

// One all_gather across every local device: device g's `bytes` at sends[g]
// land at recvs[d] + g * bytes on every device d. sends[g] may be
// recvs[g] + g * bytes (in place); any other overlap of sends[g] with
// recvs[g] is refused, as NCCL does not define it. An all_gather of 0 bytes
// does nothing (as in NCCL: no work, not counted, no wait between devices).
// Both spans hold device_count() entries.
struct LocalAllGather {
  std::vector<const void*> sends;
  std::vector<void*> recvs;
  int64_t bytes = 0;
};

// What a LocalCollective moved since it was made, per device; for tests and
// benchmarks.
struct LocalTransferStats {
  std::vector<int64_t> host_to_device_bytes;
  std::vector<int64_t> device_to_host_bytes;
  int64_t all_gathers = 0;  // LocalAllGather operations run
};

class LocalCollective {
 public:
  virtual ~LocalCollective() = default;

  // device_count is G, the number of local devices; device indices are
  // 0..G-1 (not CUDA ordinals).
  virtual int device_count() const = 0;

  // AllocateDevice returns `bytes` of memory on `device`, uninitialized.
  // RESOURCE_EXHAUSTED when it does not fit, INVALID_ARGUMENT for a device
  // out of range.
  virtual absl::StatusOr<LocalBuffer> AllocateDevice(int device,
                                                     int64_t bytes) = 0;
  // AllocateHost returns `bytes` of host memory that every device copies
  // from and to at full speed (page-locked for CUDA), uninitialized.
  virtual absl::StatusOr<LocalBuffer> AllocateHost(int64_t bytes) = 0;

  // CopyToDevice enqueues a copy of `bytes` from host memory `src` to
  // `device`'s memory `dst`; CopyToHost the other way. Host memory from
  // AllocateHost is fastest; other host memory works.
  virtual absl::Status CopyToDevice(int device, void* dst, const void* src,
                                    int64_t bytes) = 0;
  virtual absl::Status CopyToHost(int device, void* dst, const void* src,
                                  int64_t bytes) = 0;

  // AllGather enqueues `ops`, in order, as one group (one ncclGroupStart /
  // ncclGroupEnd for NCCL).
  virtual absl::Status AllGather(absl::Span<const LocalAllGather> ops) = 0;

  // Synchronize blocks until everything enqueued has finished; returns the
  // first error of it (the collective may be unusable after an error).
  virtual absl::Status Synchronize() = 0;

  virtual LocalTransferStats stats() const = 0;
};

// CheckLocalAllGather returns INVALID_ARGUMENT unless `op` has one send and
// one receive pointer per device of `local` and a non-negative size, and no
// device's send buffer overlaps its receive buffer other than as its own
// slot (in place). Every LocalCollective checks its ops with it before it
// enqueues any.
absl::Status CheckLocalAllGather(const LocalCollective& local,
                                 const LocalAllGather& op);

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_NCCL_LOCAL_COLLECTIVE_H_
