// The one place where CUDA runtime and NCCL errors become absl::Status
// (STYLE.md practice 3). Messages carry cudaGetErrorName/cudaGetErrorString
// or ncclGetErrorString (and ncclGetLastError's detail).
#ifndef FEDGATHER_CLIENT_NCCL_NCCL_STATUS_H_
#define FEDGATHER_CLIENT_NCCL_NCCL_STATUS_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace fedgather {

// CudaStatus: OK for cudaSuccess; else "<what>: <name>: <string>" with
//   RESOURCE_EXHAUSTED  cudaErrorMemoryAllocation
//   INVALID_ARGUMENT    cudaErrorInvalidValue, cudaErrorInvalidDevice
//   UNAVAILABLE         no device or no usable driver (cudaErrorNoDevice,
//                       cudaErrorInsufficientDriver,
//                       cudaErrorDevicesUnavailable)
//   INTERNAL            anything else
// For an error it also clears the runtime's last error (cudaGetLastError),
// so that a later CUDA call does not report a failure that is not its own.
// A sticky error (one that breaks the context) stays: every call sees it.
absl::Status CudaStatus(cudaError_t error, absl::string_view what);

// NcclStatus: OK for ncclSuccess; else "<what>: <ncclGetErrorString>" (and
// ncclGetLastError(comm)'s text when there is one) with
//   INVALID_ARGUMENT  ncclInvalidArgument, ncclInvalidUsage
//   UNAVAILABLE       ncclSystemError, ncclRemoteError (a peer or the
//                     network failed)
//   INTERNAL          anything else (ncclUnhandledCudaError, ncclInternalError)
// After ncclUnhandledCudaError it clears the runtime's last error, as
// CudaStatus does.
absl::Status NcclStatus(ncclResult_t result, absl::string_view what,
                        ncclComm_t comm = nullptr);

// CudaDeviceCount returns how many CUDA devices this process sees; the
// CUDA runtime's error when it cannot tell (UNAVAILABLE without a driver),
// and UNAVAILABLE when it sees none. Tests skip on an error from it.
absl::StatusOr<int> CudaDeviceCount();

// CheckCudaDevices returns INVALID_ARGUMENT naming the first entry of
// `cuda_devices` (CUDA ordinals) that is negative or repeats an earlier one,
// or, when `visible` >= 0, that is not below `visible` (CudaDeviceCount).
// It calls no CUDA function, so callers check a list before any.
absl::Status CheckCudaDevices(absl::Span<const int> cuda_devices,
                              int visible = -1);

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_NCCL_NCCL_STATUS_H_
