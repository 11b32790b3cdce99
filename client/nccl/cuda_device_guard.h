// CudaDeviceGuard: gives the calling thread back its current CUDA device.
// cudaSetDevice changes the device for the whole thread, and callers (a
// PyTorch process, for example) count on theirs staying current; every
// call of fg_nccl_local and fg_client_nccl that switches devices holds one
// of these. A thread that never chose a device has device 0 current (the
// runtime's default), so it gets device 0 back, and with it device 0's
// primary context (memory on GPU 0) even when the call used other GPUs: a
// caller that wants none there makes its own device current first.
#ifndef FEDGATHER_CLIENT_NCCL_CUDA_DEVICE_GUARD_H_
#define FEDGATHER_CLIENT_NCCL_CUDA_DEVICE_GUARD_H_

#include <cuda_runtime_api.h>

namespace fedgather {

class CudaDeviceGuard {
 public:
  // Remembers the current device (none when the runtime cannot say).
  CudaDeviceGuard() {
    if (cudaGetDevice(&saved_) != cudaSuccess) {
      saved_ = -1;
      (void)cudaGetLastError();
    }
  }
  // Makes it current again, only if it changed (cudaSetDevice initializes
  // the device's context). Its own errors are dropped and cleared: the call
  // being left has already reported its own.
  ~CudaDeviceGuard() {
    if (saved_ < 0) return;
    int now = -1;
    if (cudaGetDevice(&now) != cudaSuccess ||
        (now != saved_ && cudaSetDevice(saved_) != cudaSuccess)) {
      (void)cudaGetLastError();
    }
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int saved_ = -1;
};

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_NCCL_CUDA_DEVICE_GUARD_H_
