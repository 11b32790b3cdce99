// CUDA and NCCL errors as absl::Status (client/nccl/nccl_status.h), and
// what fg_client_nccl says on a machine without a GPU. Needs no GPU.
#include "client/nccl/nccl_status.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "client/nccl/nccl_local_collective.h"

namespace fedgather {
namespace {

using ::testing::HasSubstr;

TEST(NcclStatusTest, CudaErrorsCarryTheRuntimesNameAndText) {
  EXPECT_TRUE(CudaStatus(cudaSuccess, "cudaMalloc").ok());
  const absl::Status oom = CudaStatus(cudaErrorMemoryAllocation, "cudaMalloc");
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(oom.message()),
              HasSubstr(std::string("cudaMalloc: cudaErrorMemoryAllocation: ") +
                        cudaGetErrorString(cudaErrorMemoryAllocation)));
  EXPECT_EQ(CudaStatus(cudaErrorInsufficientDriver, "x").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(CudaStatus(cudaErrorNoDevice, "x").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(CudaStatus(cudaErrorInvalidDevice, "x").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaStatus(cudaErrorLaunchFailure, "x").code(),
            absl::StatusCode::kInternal);
}

TEST(NcclStatusTest, NcclErrorsCarryNcclsText) {
  EXPECT_TRUE(NcclStatus(ncclSuccess, "ncclAllGather").ok());
  const absl::Status usage = NcclStatus(ncclInvalidUsage, "ncclAllGather");
  EXPECT_EQ(usage.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(usage.message()),
              HasSubstr(std::string("ncclAllGather: ") +
                        ncclGetErrorString(ncclInvalidUsage)));
  EXPECT_EQ(NcclStatus(ncclInvalidArgument, "x").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclStatus(ncclRemoteError, "x").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(NcclStatus(ncclSystemError, "x").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(NcclStatus(ncclUnhandledCudaError, "x").code(),
            absl::StatusCode::kInternal);
}

// Without a GPU (these build machines) the device count and the local
// collective fail with the runtime's reason instead of crashing.
TEST(NcclStatusTest, WithoutADeviceCreateSaysWhy) {
  const absl::StatusOr<int> count = CudaDeviceCount();
  if (count.ok()) GTEST_SKIP() << *count << " CUDA device(s) present";
  EXPECT_EQ(count.status().code(), absl::StatusCode::kUnavailable)
      << count.status();
  EXPECT_THAT(std::string(count.status().message()),
              HasSubstr("cudaGetDeviceCount"));
  const absl::Status created = NcclLocalCollective::Create().status();
  EXPECT_EQ(created, count.status());
}

}  // namespace
}  // namespace fedgather
