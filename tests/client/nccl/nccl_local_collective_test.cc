// NcclLocalCollective and NcclCommunicators on real GPUs (ctest label
// `gpu`; bench/gpu/run_bundle.sh runs them). Every test skips, saying
// why, when the CUDA runtime sees no device. With one GPU, G = 1: that still
// runs NCCL's init, the streams, the pinned staging, the hand-off and a
// communicator bootstrapped through the rendezvous.
#include "client/nccl/nccl_local_collective.h"

#include <cuda_runtime_api.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "client/nccl/hierarchical_all_gather.h"
#include "client/nccl/nccl_communicators.h"
#include "client/nccl/nccl_status.h"
#include "tests/e2e/test_cluster.h"

namespace fedgather::testing {
namespace {

// Devices returns the visible CUDA device count, or skips the test.
#define FG_DEVICES_OR_SKIP(var)                                        \
  const absl::StatusOr<int> var##_or = CudaDeviceCount();              \
  if (!var##_or.ok()) {                                                \
    GTEST_SKIP() << "no CUDA device: " << var##_or.status().message(); \
  }                                                                    \
  const int var = *var##_or

std::vector<int> Range(int begin, int end) {
  std::vector<int> out;
  for (int d = begin; d < end; ++d) out.push_back(d);
  return out;
}

TEST(NcclLocalCollectiveTest, CopiesAndAllGathersInAndOutOfPlace) {
  FG_DEVICES_OR_SKIP(devices);
  auto local = NcclLocalCollective::Create();
  ASSERT_TRUE(local.ok()) << local.status();
  ASSERT_EQ((*local)->device_count(), devices);
  constexpr int64_t kBytes = (4 << 20) + 3;  // not a multiple of anything
  std::vector<LocalBuffer> in, out;
  LocalBuffer pinned = *(*local)->AllocateHost(kBytes * devices);
  std::vector<uint8_t> expected;
  for (int g = 0; g < devices; ++g) {
    const std::vector<uint8_t> mine = RandomBytes(kBytes, 900 + g);
    expected.insert(expected.end(), mine.begin(), mine.end());
    in.push_back(*(*local)->AllocateDevice(g, kBytes));
    out.push_back(*(*local)->AllocateDevice(g, kBytes * devices));
    // Device 0 copies from pageable memory, the others from pinned.
    const void* src = mine.data();
    if (g > 0) {
      std::memcpy(pinned.bytes_data() + g * kBytes, mine.data(), kBytes);
      src = pinned.bytes_data() + g * kBytes;
    }
    ASSERT_TRUE((*local)->CopyToDevice(g, in[g].data(), src, kBytes).ok());
    ASSERT_TRUE((*local)->Synchronize().ok());  // `mine` goes out of scope
  }
  LocalAllGather op;
  op.bytes = kBytes;
  for (int g = 0; g < devices; ++g) {
    op.sends.push_back(in[g].data());
    op.recvs.push_back(out[g].data());
  }
  ASSERT_TRUE((*local)->AllGather({&op, 1}).ok());
  ASSERT_TRUE((*local)->Synchronize().ok());
  std::vector<uint8_t> got(kBytes * devices);
  for (int g = 0; g < devices; ++g) {
    std::memset(got.data(), 0, got.size());
    ASSERT_TRUE(
        (*local)->CopyToHost(g, got.data(), out[g].data(), got.size()).ok());
    ASSERT_TRUE((*local)->Synchronize().ok());
    EXPECT_EQ(got, expected) << "out of place, device " << g;
  }
  // In place: each device's own slot of a zeroed buffer, then gather.
  for (int g = 0; g < devices; ++g) {
    ASSERT_EQ(cudaSetDevice((*local)->cuda_devices()[g]), cudaSuccess);
    ASSERT_EQ(cudaMemset(out[g].data(), 0, kBytes * devices), cudaSuccess);
    // cudaMemset runs on the legacy default stream, which does not order
    // the collective's non-blocking streams: finish it before the copy and
    // the all_gather write the same buffer.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_TRUE((*local)
                    ->CopyToDevice(g, out[g].bytes_data() + g * kBytes,
                                   expected.data() + g * kBytes, kBytes)
                    .ok());
    op.sends[g] = out[g].bytes_data() + g * kBytes;
  }
  ASSERT_TRUE((*local)->AllGather({&op, 1}).ok());
  ASSERT_TRUE((*local)->Synchronize().ok());
  for (int g = 0; g < devices; ++g) {
    ASSERT_TRUE(
        (*local)
            ->CopyToHost(g, pinned.data(), out[g].data(), kBytes * devices)
            .ok());
    ASSERT_TRUE((*local)->Synchronize().ok());
    EXPECT_EQ(0, std::memcmp(pinned.data(), expected.data(), expected.size()))
        << "in place, device " << g;
  }
  EXPECT_EQ((*local)->stats().all_gathers, 2);
}

TEST(NcclLocalCollectiveTest, BadArgumentsAreStatuses) {
  FG_DEVICES_OR_SKIP(devices);
  EXPECT_EQ(NcclLocalCollective::Create({devices}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto local = NcclLocalCollective::Create({0});
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ((*local)->AllocateDevice(1, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  // More memory than any GPU has: the CUDA runtime's error, as a status.
  const absl::Status huge =
      (*local)->AllocateDevice(0, int64_t{1} << 50).status();
  EXPECT_EQ(huge.code(), absl::StatusCode::kResourceExhausted) << huge;
  EXPECT_THAT(
      std::string(huge.message()),
      ::testing::HasSubstr(cudaGetErrorString(cudaErrorMemoryAllocation)));
  // The failed cudaMalloc left no error for the next call to see.
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  LocalAllGather op;
  op.bytes = 8;
  EXPECT_EQ((*local)->AllGather({&op, 1}).code(),
            absl::StatusCode::kInvalidArgument);
}

// Whatever device the caller has current stays current: Create, the
// allocations, copies, all_gathers, Synchronize and the destructor switch
// devices and switch back. The caller's is the last device and the
// collective's first is device 0, so with one GPU nothing could switch.
TEST(NcclLocalCollectiveTest, LeavesTheCallersDeviceCurrent) {
  FG_DEVICES_OR_SKIP(devices);
  if (devices < 2) GTEST_SKIP() << "needs 2 GPUs";
  const int mine = devices - 1;
  ASSERT_EQ(cudaSetDevice(mine), cudaSuccess);
  auto current = [] {
    int d = -1;
    EXPECT_EQ(cudaGetDevice(&d), cudaSuccess);
    return d;
  };
  {
    auto local = NcclLocalCollective::Create();
    ASSERT_TRUE(local.ok()) << local.status();
    EXPECT_EQ(current(), mine) << "Create";
    std::vector<LocalBuffer> in, out;
    LocalAllGather op;
    op.bytes = 64;
    const std::vector<uint8_t> host(64 * devices, 7);
    for (int g = 0; g < devices; ++g) {
      in.push_back(*(*local)->AllocateDevice(g, 64));
      out.push_back(*(*local)->AllocateDevice(g, 64 * devices));
      ASSERT_TRUE(
          (*local)->CopyToDevice(g, in[g].data(), host.data(), 64).ok());
      op.sends.push_back(in[g].data());
      op.recvs.push_back(out[g].data());
    }
    EXPECT_EQ(current(), mine) << "AllocateDevice, CopyToDevice";
    ASSERT_TRUE((*local)->AllGather({&op, 1}).ok());
    ASSERT_TRUE((*local)->Synchronize().ok());
    EXPECT_EQ(current(), mine) << "AllGather, Synchronize";
    in.clear();
    out.clear();
    EXPECT_EQ(current(), mine) << "freeing device memory";
  }
  EXPECT_EQ(current(), mine) << "the destructor";
}

// Inputs written on the caller's own non-blocking streams (as PyTorch's
// current stream is to the collective) are ordered before the all_gather by
// WaitForStreams, without a host synchronization. The caller's writes are
// held back (behind a host function waiting for `release`) until the
// all_gather has been enqueued, so without the wait it would read the
// zeros every time, not only when it wins a race.
TEST(NcclLocalCollectiveTest, WaitForStreamsOrdersTheCallersWrites) {
  FG_DEVICES_OR_SKIP(devices);
  auto local = NcclLocalCollective::Create();
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ((*local)->WaitForStreams({}).code(),
            absl::StatusCode::kInvalidArgument);
  constexpr int64_t kBytes = 1 << 20;
  std::atomic<bool> release{false};
  const cudaHostFn_t hold = [](void* flag) {
    while (!static_cast<std::atomic<bool>*>(flag)->load()) {
      std::this_thread::yield();
    }
  };
  std::vector<LocalBuffer> in, out;
  std::vector<cudaStream_t> theirs(devices, nullptr);
  // Whatever way the test ends, the streams are let go before the buffers
  // are freed (cudaFree waits for them).
  const absl::Cleanup let_go = [&release] { release = true; };
  LocalAllGather op;
  op.bytes = kBytes;
  for (int g = 0; g < devices; ++g) {
    in.push_back(*(*local)->AllocateDevice(g, kBytes));
    out.push_back(*(*local)->AllocateDevice(g, kBytes * devices));
    op.sends.push_back(in[g].data());
    op.recvs.push_back(out[g].data());
    ASSERT_EQ(cudaSetDevice((*local)->cuda_devices()[g]), cudaSuccess);
    ASSERT_EQ(cudaMemset(in[g].data(), 0, kBytes), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&theirs[g], cudaStreamNonBlocking),
              cudaSuccess);
    ASSERT_EQ(cudaLaunchHostFunc(theirs[g], hold, &release), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(in[g].data(), 1 + g, kBytes, theirs[g]),
              cudaSuccess);
  }
  ASSERT_TRUE((*local)->WaitForStreams(theirs).ok());
  const absl::Status enqueued = (*local)->AllGather({&op, 1});
  release = true;
  ASSERT_TRUE(enqueued.ok()) << enqueued;
  ASSERT_TRUE((*local)->Synchronize().ok());
  LocalBuffer back = *(*local)->AllocateHost(kBytes * devices);
  for (int d = 0; d < devices; ++d) {
    ASSERT_TRUE(
        (*local)
            ->CopyToHost(d, back.data(), out[d].data(), kBytes * devices)
            .ok());
    ASSERT_TRUE((*local)->Synchronize().ok());
    for (int g = 0; g < devices; ++g) {
      const uint8_t* slot = back.bytes_data() + g * kBytes;
      EXPECT_EQ(std::count(slot, slot + kBytes, 1 + g), kBytes)
          << "device " << d << " slot " << g;
    }
  }
  for (int g = 0; g < devices; ++g) {
    ASSERT_EQ(cudaSetDevice((*local)->cuda_devices()[g]), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(theirs[g]), cudaSuccess);
  }
}

// The hierarchical all_gather on GPUs against a real server: N = 1 node
// over every GPU, or N = 2 nodes (each half the GPUs; with one GPU both
// nodes share it with G = 1, which has no cross-GPU waits).
class NcclHierarchicalTest : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Nodes, NcclHierarchicalTest, ::testing::Values(1, 2));

TEST_P(NcclHierarchicalTest, EveryGpuHoldsEveryGlobalRankInOrder) {
  FG_DEVICES_OR_SKIP(visible);
  const int world = GetParam();
  const int per_node = world == 1 ? visible : std::max(1, visible / 2);
  const int ranks = world * per_node;
  constexpr int64_t kBytes = (3 << 20) + 5;
  TestCluster cluster(world);
  Members members(cluster);
  std::vector<std::unique_ptr<NcclLocalCollective>> locals;
  std::vector<std::vector<LocalBuffer>> memory(world);
  std::vector<std::vector<std::vector<ConstDeviceTensor>>> in(world);
  std::vector<std::vector<std::vector<MutableDeviceTensor>>> out(world);
  const TensorSpec spec{"w", DType::kU8, {kBytes}};
  const TensorSpec gathered{"w", DType::kU8, {ranks, kBytes}};
  for (int n = 0; n < world; ++n) {
    const int first = per_node * n < visible ? per_node * n : 0;
    auto local = NcclLocalCollective::Create(Range(first, first + per_node));
    ASSERT_TRUE(local.ok()) << local.status();
    for (int g = 0; g < per_node; ++g) {
      LocalBuffer input = *(*local)->AllocateDevice(g, kBytes);
      LocalBuffer output = *(*local)->AllocateDevice(g, kBytes * ranks);
      const std::vector<uint8_t> data = RandomBytes(kBytes, n * per_node + g);
      ASSERT_TRUE(
          (*local)->CopyToDevice(g, input.data(), data.data(), kBytes).ok());
      ASSERT_TRUE((*local)->Synchronize().ok());
      in[n].push_back({{spec, input.data()}});
      out[n].push_back({{gathered, output.data()}});
      memory[n].push_back(std::move(input));
      memory[n].push_back(std::move(output));
    }
    locals.push_back(std::move(*local));
  }
  std::vector<absl::StatusOr<DeviceGatherResult>> results(world);
  RunRanks(world, [&](int n) {
    results[n] =
        AllGatherToDevices(*members.groups[n], *locals[n], in[n], out[n]);
  });
  std::vector<uint8_t> expected;
  for (int r = 0; r < ranks; ++r) {
    const std::vector<uint8_t> part = RandomBytes(kBytes, r);
    expected.insert(expected.end(), part.begin(), part.end());
  }
  for (int n = 0; n < world; ++n) {
    ASSERT_TRUE(results[n].ok()) << results[n].status();
    EXPECT_EQ(0, std::memcmp(results[n]->tensors[0].data, expected.data(),
                             expected.size()))
        << "host of node " << n;
    const LocalTransferStats stats = locals[n]->stats();
    std::vector<uint8_t> got(expected.size());
    for (int g = 0; g < per_node; ++g) {
      EXPECT_EQ(stats.host_to_device_bytes[g], kBytes + (world - 1) * kBytes);
      ASSERT_TRUE(locals[n]
                      ->CopyToHost(g, got.data(), out[n][g][0].data, got.size())
                      .ok());
      ASSERT_TRUE(locals[n]->Synchronize().ok());
      EXPECT_EQ(got, expected) << "node " << n << " GPU " << g;
    }
  }
  results.clear();
  memory.clear();
}

// A communicator across the nodes, from the id the rendezvous shared: one
// GPU per node, as many nodes as GPUs (at most 4), then an ncclAllGather.
TEST(NcclCommunicatorsTest, NodesBuildACommunicatorFromTheSharedId) {
  FG_DEVICES_OR_SKIP(visible);
  const int world = std::min(visible, 4);
  constexpr size_t kBytes = 1 << 20;
  TestCluster cluster(world);
  Members members(cluster);
  std::vector<std::vector<uint8_t>> got(world);
  std::vector<absl::Status> statuses = members.Run([&](int n) -> absl::Status {
    absl::StatusOr<std::unique_ptr<NcclCommunicators>> comms =
        NcclCommunicators::Create(*members.groups[n], {n});
    if (!comms.ok()) return comms.status();
    if ((*comms)->size() != world || (*comms)->global_rank(0) != n) {
      return absl::InternalError("wrong ranks");
    }
    if (cudaSetDevice(n) != cudaSuccess) return absl::InternalError("device");
    void* send = nullptr;
    void* recv = nullptr;
    const std::vector<uint8_t> mine = RandomBytes(kBytes, 70 + n);
    absl::Status status = CudaStatus(cudaMalloc(&send, kBytes), "cudaMalloc");
    if (status.ok()) {
      status = CudaStatus(cudaMalloc(&recv, kBytes * world), "cudaMalloc");
    }
    if (status.ok()) {
      status = CudaStatus(
          cudaMemcpy(send, mine.data(), kBytes, cudaMemcpyHostToDevice),
          "cudaMemcpy");
    }
    if (status.ok()) {
      status = NcclStatus(ncclAllGather(send, recv, kBytes, ncclInt8,
                                        (*comms)->comm(0), nullptr),
                          "ncclAllGather");
    }
    if (status.ok()) {
      got[n].resize(kBytes * world);
      status = CudaStatus(cudaMemcpy(got[n].data(), recv, got[n].size(),
                                     cudaMemcpyDeviceToHost),
                          "cudaMemcpy");
    }
    cudaFree(send);
    cudaFree(recv);
    return status;
  });
  std::vector<uint8_t> expected;
  for (int r = 0; r < world; ++r) {
    const std::vector<uint8_t> part = RandomBytes(kBytes, 70 + r);
    expected.insert(expected.end(), part.begin(), part.end());
  }
  for (int n = 0; n < world; ++n) {
    ASSERT_TRUE(statuses[n].ok()) << "node " << n << ": " << statuses[n];
    EXPECT_EQ(got[n], expected) << "node " << n;
  }
}

}  // namespace
}  // namespace fedgather::testing
