// CpuLocalCollective: a LocalCollective that emulates G devices in host
// memory, for tests and for nodes without GPUs (`fedgather join --gpus G
// --emulate-gpus`). It is strict where a GPU would be: every device pointer
// must lie inside memory allocated for that device (a pointer of the wrong
// device, or a range that runs past its buffer, is INVALID_ARGUMENT when the
// operation is enqueued), and copies and all_gathers run only in
// Synchronize, as a stream would run them later, so a caller that reads a
// result before synchronizing sees stale bytes, as it would on a GPU.
//
// Streams: each device's work runs in the order it was enqueued on that
// device, and an all_gather of more than 0 bytes runs after the work
// enqueued before it on every device and before the work enqueued after it
// (NCCL's kernels wait for each other: no device gets past the collective
// before every device has reached it). Nothing else orders two devices: CUDA
// streams of different devices run concurrently. Synchronize runs one
// thread, so it must pick some order; between two all_gathers it runs the
// devices' work device by device, the highest device first, so a caller that
// counts on one device's copy finishing before a later-enqueued copy of a
// lower device (a host buffer one writes and the other reads) sees the
// stale bytes here, as it may on GPUs. A 0-byte all_gather is no work and no
// wait, as in NCCL.
#ifndef FEDGATHER_CLIENT_NCCL_CPU_LOCAL_COLLECTIVE_H_
#define FEDGATHER_CLIENT_NCCL_CPU_LOCAL_COLLECTIVE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/nccl/local_collective.h"

namespace fedgather {

class CpuLocalCollective : public LocalCollective {
 public:
  // `devices` emulated devices (at least 1).
  explicit CpuLocalCollective(int devices);
  ~CpuLocalCollective() override;

  int device_count() const override { return devices_; }
  absl::StatusOr<LocalBuffer> AllocateDevice(int device,
                                             int64_t bytes) override;
  absl::StatusOr<LocalBuffer> AllocateHost(int64_t bytes) override;
  absl::Status CopyToDevice(int device, void* dst, const void* src,
                            int64_t bytes) override;
  absl::Status CopyToHost(int device, void* dst, const void* src,
                          int64_t bytes) override;
  absl::Status AllGather(absl::Span<const LocalAllGather> ops) override;
  absl::Status Synchronize() override;
  LocalTransferStats stats() const override;

 private:
  struct Allocation {
    int device;
    int64_t bytes;
  };
  // One enqueued piece of work: on `device`'s stream, or an all_gather
  // (kEveryDevice), which every device's stream reaches before it runs.
  static constexpr int kEveryDevice = -2;
  struct Step {
    int device;
    std::function<void()> run;
  };
  absl::StatusOr<LocalBuffer> Allocate(int device, int64_t bytes);
  absl::Status Copy(int device, void* dst, const void* src, int64_t bytes,
                    bool to_device);
  // CheckDevice: [data, data + bytes) lies inside one allocation of
  // `device`. CheckHost: it overlaps no device's allocation.
  absl::Status CheckDevice(int device, const void* data, int64_t bytes,
                           const char* what) const;
  absl::Status CheckHost(const void* data, int64_t bytes,
                         const char* what) const;

  const int devices_;
  mutable absl::Mutex mu_;
  // Every live allocation by start address.
  std::map<uintptr_t, Allocation> allocations_ ABSL_GUARDED_BY(mu_);
  // Enqueued work, run by Synchronize.
  std::vector<Step> pending_ ABSL_GUARDED_BY(mu_);
  LocalTransferStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_NCCL_CPU_LOCAL_COLLECTIVE_H_
