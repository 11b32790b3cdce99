// NcclLocalCollective: a LocalCollective over this node's GPUs, driven from
// one process: one NCCL communicator across them (ncclCommInitAll), one
// non-blocking CUDA stream per GPU, device memory from cudaMalloc and
// page-locked (pinned, portable) host memory from cudaHostAlloc, which is
// what the hierarchical all_gather stages the host result in. Part of
// fg_nccl_local (and the NCCL module, nccl_module.h), built when
// fedgather/config.h says FEDGATHER_HAVE_NCCL.
//
// Every call leaves the calling thread's current CUDA device as it found it,
// and a failed CUDA call leaves no error behind for the next one
// (nccl_status.h). Synchronize polls the streams and NCCL's asynchronous
// errors in turn rather than blocking on a stream, because NCCL's kernels
// may never finish after such an error. After one the communicators are
// aborted, which ends their kernels: Synchronize returns that error, and
// every later AllGather fails with FAILED_PRECONDITION carrying it; copies
// still work.
#ifndef FEDGATHER_CLIENT_NCCL_NCCL_LOCAL_COLLECTIVE_H_
#define FEDGATHER_CLIENT_NCCL_NCCL_LOCAL_COLLECTIVE_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/nccl/local_collective.h"

namespace fedgather {

class NcclLocalCollective : public LocalCollective {
 public:
  // Create initializes NCCL over `cuda_devices` (CUDA ordinals; empty:
  // every visible device, in order); local device g is cuda_devices[g].
  // Blocks while NCCL initializes. Errors: INVALID_ARGUMENT naming an
  // ordinal that is negative or repeated (checked before any CUDA call, so
  // also without a GPU) or out of range (cudaGetDeviceCount); UNAVAILABLE
  // when there is no CUDA device or driver (the runtime's reason); NCCL's
  // init error otherwise.
  static absl::StatusOr<std::unique_ptr<NcclLocalCollective>> Create(
      std::vector<int> cuda_devices = {});
  // Waits for the streams, then destroys the communicators and streams.
  // Buffers it allocated must be gone first.
  ~NcclLocalCollective() override;

  int device_count() const override {
    return static_cast<int>(devices_.size());
  }
  const std::vector<int>& cuda_devices() const { return devices_; }

  absl::StatusOr<LocalBuffer> AllocateDevice(int device,
                                             int64_t bytes) override;
  absl::StatusOr<LocalBuffer> AllocateHost(int64_t bytes) override;
  absl::Status CopyToDevice(int device, void* dst, const void* src,
                            int64_t bytes) override;
  absl::Status CopyToHost(int device, void* dst, const void* src,
                          int64_t bytes) override;
  absl::Status AllGather(absl::Span<const LocalAllGather> ops) override;
  // WaitForStreams orders the work enqueued next on each device after the
  // work enqueued so far on the caller's streams[g] (a stream of CUDA device
  // cuda_devices()[g]; nullptr is the legacy default stream): an event
  // recorded on it that device g's stream waits for. It does not block.
  // Call it before AllGatherToDevices when its inputs were written on
  // another stream (hierarchical_all_gather.h). INVALID_ARGUMENT unless there
  // is one stream per device; the runtime's error otherwise.
  absl::Status WaitForStreams(absl::Span<const cudaStream_t> streams);
  absl::Status Synchronize() override;
  LocalTransferStats stats() const override;

 private:
  NcclLocalCollective(std::vector<int> devices);
  absl::Status CheckDevice(int device) const;
  // AsyncNcclError: the first asynchronous error of a communicator not yet
  // aborted (ncclCommGetAsyncError); OK when there is none.
  absl::Status AsyncNcclError() const;
  absl::Status Copy(int device, void* dst, const void* src, int64_t bytes,
                    cudaMemcpyKind kind);
  // AbortCommunicators: ncclCommAbort for each; AllGather then fails with
  // FAILED_PRECONDITION carrying `why`.
  void AbortCommunicators(const absl::Status& why);

  const std::vector<int> devices_;
  std::vector<cudaStream_t> streams_;
  std::vector<ncclComm_t> comms_;  // null once aborted
  absl::Status aborted_;           // why the communicators were aborted
  mutable absl::Mutex mu_;
  LocalTransferStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_NCCL_NCCL_LOCAL_COLLECTIVE_H_
