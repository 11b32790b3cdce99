// CUDA and NCCL errors as absl::Status (client/nccl/nccl_status.h), and
// what fg_nccl_local says on a machine without a GPU. Needs no GPU.
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

TEST(NcclStatusTest, CudaDeviceListsAreCheckedEntryByEntry) {
  EXPECT_TRUE(CheckCudaDevices({}).ok());
  EXPECT_TRUE(CheckCudaDevices({2, 0, 1}).ok());
  EXPECT_TRUE(CheckCudaDevices({2, 0, 1}, 3).ok());
  const absl::Status repeated = CheckCudaDevices({0, 1, 0});
  EXPECT_EQ(repeated.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(repeated.message()),
              HasSubstr("CUDA devices [0, 1, 0]: entry 2 (0) repeats entry 0"));
  EXPECT_THAT(std::string(CheckCudaDevices({0, -1}).message()),
              HasSubstr("entry 1 (-1) is negative"));
  const absl::Status range = CheckCudaDevices({1, 2}, 2);
  EXPECT_EQ(range.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(range.message()),
              HasSubstr("entry 1 (2) is out of range (2 visible)"));
}

// A repeated or negative ordinal is refused before any CUDA call: the same
// INVALID_ARGUMENT with or without a GPU.
TEST(NcclStatusTest, CreateRefusesABadDeviceListBeforeCuda) {
  const absl::Status repeated = NcclLocalCollective::Create({0, 0}).status();
  EXPECT_EQ(repeated.code(), absl::StatusCode::kInvalidArgument) << repeated;
  EXPECT_THAT(std::string(repeated.message()), HasSubstr("repeats entry 0"));
  const absl::Status negative = NcclLocalCollective::Create({-1}).status();
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument) << negative;
  EXPECT_THAT(std::string(negative.message()), HasSubstr("is negative"));
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
