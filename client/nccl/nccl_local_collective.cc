#include "client/nccl/nccl_local_collective.h"

#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/nccl/cuda_device_guard.h"
#include "client/nccl/nccl_status.h"
#include "common/status_macros.h"

namespace fedgather {

NcclLocalCollective::NcclLocalCollective(std::vector<int> devices)
    : devices_(std::move(devices)) {
  stats_.host_to_device_bytes.resize(devices_.size());
  stats_.device_to_host_bytes.resize(devices_.size());
}

absl::StatusOr<std::unique_ptr<NcclLocalCollective>>
NcclLocalCollective::Create(std::vector<int> cuda_devices) {
  FG_RETURN_IF_ERROR(CheckCudaDevices(cuda_devices));  // before any CUDA call
  FG_ASSIGN_OR_RETURN(const int visible, CudaDeviceCount());
  if (cuda_devices.empty()) {
    for (int d = 0; d < visible; ++d) cuda_devices.push_back(d);
  }
  FG_RETURN_IF_ERROR(CheckCudaDevices(cuda_devices, visible));
  std::unique_ptr<NcclLocalCollective> local(
      new NcclLocalCollective(std::move(cuda_devices)));
  CudaDeviceGuard device_guard;
  for (int d : local->devices_) {
    FG_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(d), "cudaSetDevice"));
    cudaStream_t stream = nullptr;
    FG_RETURN_IF_ERROR(
        CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                   absl::StrCat("cudaStreamCreate on device ", d)));
    local->streams_.push_back(stream);
  }
  std::vector<ncclComm_t> comms(local->devices_.size(), nullptr);
  const absl::Status init = NcclStatus(
      ncclCommInitAll(comms.data(), static_cast<int>(comms.size()),
                      local->devices_.data()),
      absl::StrCat("ncclCommInitAll over ", comms.size(), " devices"));
  if (!init.ok()) {
    // What a failed init created is aborted, not leaked.
    for (ncclComm_t comm : comms) {
      if (comm != nullptr) (void)ncclCommAbort(comm);
    }
    return init;
  }
  local->comms_ = std::move(comms);
  return local;
}

NcclLocalCollective::~NcclLocalCollective() {
  CudaDeviceGuard device_guard;
  (void)Synchronize();  // aborts the communicators after an error in them
  for (ncclComm_t comm : comms_) {
    if (comm != nullptr) (void)ncclCommDestroy(comm);
  }
  for (size_t g = 0; g < streams_.size(); ++g) {
    // Errors are dropped (a destructor), and cleared by CudaStatus.
    (void)CudaStatus(cudaSetDevice(devices_[g]), "cudaSetDevice");
    (void)CudaStatus(cudaStreamDestroy(streams_[g]), "cudaStreamDestroy");
  }
}

void NcclLocalCollective::AbortCommunicators(const absl::Status& why) {
  for (ncclComm_t& comm : comms_) {
    if (comm != nullptr) (void)ncclCommAbort(comm);
    comm = nullptr;
  }
  if (aborted_.ok()) aborted_ = why;
}

absl::Status NcclLocalCollective::CheckDevice(int device) const {
  if (device < 0 || device >= device_count()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", device, " is not one of the ", device_count(),
                     " local devices"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LocalBuffer> NcclLocalCollective::AllocateDevice(int device,
                                                                int64_t bytes) {
  FG_RETURN_IF_ERROR(CheckDevice(device));
  const int cuda = devices_[device];
  CudaDeviceGuard device_guard;
  FG_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(cuda), "cudaSetDevice"));
  void* data = nullptr;
  FG_RETURN_IF_ERROR(CudaStatus(
      cudaMalloc(&data, static_cast<size_t>(bytes > 0 ? bytes : 1)),
      absl::StrCat("cudaMalloc of ", bytes, " bytes on CUDA device ", cuda)));
  return LocalBuffer(device, data, bytes, [cuda](void* p) {
    CudaDeviceGuard device_guard;
    (void)CudaStatus(cudaSetDevice(cuda), "cudaSetDevice");
    (void)CudaStatus(cudaFree(p), "cudaFree");
  });
}

absl::StatusOr<LocalBuffer> NcclLocalCollective::AllocateHost(int64_t bytes) {
  void* data = nullptr;
  FG_RETURN_IF_ERROR(CudaStatus(
      cudaHostAlloc(&data, static_cast<size_t>(bytes > 0 ? bytes : 1),
                    cudaHostAllocPortable),
      absl::StrCat("cudaHostAlloc of ", bytes, " pinned bytes")));
  return LocalBuffer(LocalBuffer::kHost, data, bytes, [](void* p) {
    (void)CudaStatus(cudaFreeHost(p), "cudaFreeHost");
  });
}

absl::Status NcclLocalCollective::Copy(int device, void* dst, const void* src,
                                       int64_t bytes, cudaMemcpyKind kind) {
  FG_RETURN_IF_ERROR(CheckDevice(device));
  if (bytes == 0) return absl::OkStatus();
  CudaDeviceGuard device_guard;
  FG_RETURN_IF_ERROR(
      CudaStatus(cudaSetDevice(devices_[device]), "cudaSetDevice"));
  FG_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), kind,
                                 streams_[device]),
                 absl::StrCat("cudaMemcpyAsync of ", bytes, " bytes ",
                              kind == cudaMemcpyHostToDevice ? "to" : "from",
                              " CUDA device ", devices_[device])));
  absl::MutexLock lock(&mu_);
  (kind == cudaMemcpyHostToDevice ? stats_.host_to_device_bytes
                                  : stats_.device_to_host_bytes)[device] +=
      bytes;
  return absl::OkStatus();
}

absl::Status NcclLocalCollective::CopyToDevice(int device, void* dst,
                                               const void* src, int64_t bytes) {
  return Copy(device, dst, src, bytes, cudaMemcpyHostToDevice);
}

absl::Status NcclLocalCollective::CopyToHost(int device, void* dst,
                                             const void* src, int64_t bytes) {
  return Copy(device, dst, src, bytes, cudaMemcpyDeviceToHost);
}

absl::Status NcclLocalCollective::AllGather(
    absl::Span<const LocalAllGather> ops) {
  // Checked before NCCL sees any (the same checks as CpuLocalCollective's:
  // sizes, and no overlap but in place); 0-byte ops are skipped.
  bool any_bytes = false;
  for (const LocalAllGather& op : ops) {
    FG_RETURN_IF_ERROR(CheckLocalAllGather(*this, op));
    any_bytes = any_bytes || op.bytes > 0;
  }
  if (!any_bytes) return absl::OkStatus();
  if (!aborted_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the NCCL communicators were aborted after: ", aborted_.ToString()));
  }
  // A failed ncclGroupEnd can leave another device current.
  CudaDeviceGuard device_guard;
  FG_RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
  absl::Status status;
  int64_t run = 0;
  for (const LocalAllGather& op : ops) {
    if (op.bytes == 0) continue;
    ++run;
    for (int g = 0; g < device_count() && status.ok(); ++g) {
      status = NcclStatus(
          ncclAllGather(op.sends[g], op.recvs[g], static_cast<size_t>(op.bytes),
                        ncclInt8, comms_[g], streams_[g]),
          absl::StrCat("ncclAllGather of ", op.bytes, " bytes on device ", g),
          comms_[g]);
    }
  }
  // A group that was started is ended, whatever happened inside it.
  const absl::Status ended = NcclStatus(ncclGroupEnd(), "ncclGroupEnd");
  FG_RETURN_IF_ERROR(status);
  FG_RETURN_IF_ERROR(ended);
  absl::MutexLock lock(&mu_);
  stats_.all_gathers += run;
  return absl::OkStatus();
}

absl::Status NcclLocalCollective::WaitForStreams(
    absl::Span<const cudaStream_t> streams) {
  if (streams.size() != devices_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        streams.size(), " streams to wait for, not one for each of ",
        devices_.size(), " local devices"));
  }
  CudaDeviceGuard device_guard;
  for (size_t g = 0; g < streams.size(); ++g) {
    const int cuda = devices_[g];
    FG_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(cuda), "cudaSetDevice"));
    cudaEvent_t ready = nullptr;
    FG_RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming),
                   absl::StrCat("cudaEventCreate on CUDA device ", cuda)));
    absl::Status status =
        CudaStatus(cudaEventRecord(ready, streams[g]),
                   absl::StrCat("cudaEventRecord on caller stream ", g,
                                " (CUDA device ", cuda, ")"));
    if (status.ok()) {
      status =
          CudaStatus(cudaStreamWaitEvent(streams_[g], ready, 0),
                     absl::StrCat("cudaStreamWaitEvent on CUDA device ", cuda));
    }
    // The wait, once enqueued, outlives the event.
    (void)CudaStatus(cudaEventDestroy(ready), "cudaEventDestroy");
    FG_RETURN_IF_ERROR(status);
  }
  return absl::OkStatus();
}

absl::Status NcclLocalCollective::AsyncNcclError() const {
  for (size_t g = 0; g < comms_.size(); ++g) {
    if (comms_[g] == nullptr) continue;
    ncclResult_t async = ncclSuccess;
    absl::Status status = NcclStatus(ncclCommGetAsyncError(comms_[g], &async),
                                     "ncclCommGetAsyncError", comms_[g]);
    if (status.ok()) {
      status =
          NcclStatus(async, "NCCL on device " + std::to_string(g), comms_[g]);
    }
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status NcclLocalCollective::Synchronize() {
  CudaDeviceGuard device_guard;
  absl::Status first;
  absl::Status nccl_failed;
  for (size_t g = 0; g < streams_.size(); ++g) {
    absl::Status status =
        CudaStatus(cudaSetDevice(devices_[g]), "cudaSetDevice");
    // Polled, not waited for (NCCL's pattern for asynchronous errors): after
    // one, NCCL's kernels may spin for ever, and only aborting the
    // communicators ends them. NCCL's rule: a communicator with an
    // asynchronous error is aborted, not destroyed (ncclCommDestroy would
    // wait for that work too). The devices wait for each other in every
    // all_gather, so all of them go.
    while (status.ok()) {
      const cudaError_t query = cudaStreamQuery(streams_[g]);
      if (query == cudaSuccess) break;
      if (query != cudaErrorNotReady) {
        status = CudaStatus(
            query,
            absl::StrCat("cudaStreamQuery on CUDA device ", devices_[g]));
        break;
      }
      absl::Status nccl = AsyncNcclError();
      if (!nccl.ok()) {
        if (nccl_failed.ok()) nccl_failed = nccl;
        AbortCommunicators(nccl);
      }
      std::this_thread::yield();
    }
    if (first.ok()) first = status;
  }
  // An error raised by work that has finished.
  absl::Status nccl = AsyncNcclError();
  if (!nccl.ok()) {
    if (nccl_failed.ok()) nccl_failed = nccl;
    AbortCommunicators(nccl);
  }
  return first.ok() ? nccl_failed : first;
}

LocalTransferStats NcclLocalCollective::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace fedgather
