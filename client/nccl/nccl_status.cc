#include "client/nccl/nccl_status.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fedgather {

absl::Status CudaStatus(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();
  const std::string message = absl::StrCat(what, ": ", cudaGetErrorName(error),
                                           ": ", cudaGetErrorString(error));
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
      return absl::InvalidArgumentError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status NcclStatus(ncclResult_t result, absl::string_view what,
                        ncclComm_t comm) {
  if (result == ncclSuccess) return absl::OkStatus();
  // NCCL passes a CUDA failure on as ncclUnhandledCudaError; the CUDACHECK
  // of some versions (the 2019-2022 sources) leaves the runtime's last
  // error set, so it is cleared here whatever the version.
  if (result == ncclUnhandledCudaError) (void)cudaGetLastError();
  std::string message = absl::StrCat(what, ": ", ncclGetErrorString(result));
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && std::strlen(last) > 0) {
    absl::StrAppend(&message, " (", last, ")");
  }
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(message);
    case ncclSystemError:
    case ncclRemoteError:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  const absl::Status status =
      CudaStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (!status.ok()) return status;
  if (count == 0) {
    return absl::UnavailableError("cudaGetDeviceCount: no CUDA device");
  }
  return count;
}

absl::Status CheckCudaDevices(absl::Span<const int> cuda_devices, int visible) {
  for (size_t i = 0; i < cuda_devices.size(); ++i) {
    const int d = cuda_devices[i];
    std::string problem;
    if (d < 0) {
      problem = "is negative";
    } else if (visible >= 0 && d >= visible) {
      problem = absl::StrCat("is out of range (", visible, " visible)");
    } else {
      for (size_t j = 0; j < i; ++j) {
        if (cuda_devices[j] == d) {
          problem = absl::StrCat("repeats entry ", j);
          break;
        }
      }
    }
    if (!problem.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("CUDA devices [", absl::StrJoin(cuda_devices, ", "),
                       "]: entry ", i, " (", d, ") ", problem));
    }
  }
  return absl::OkStatus();
}

}  // namespace fedgather
