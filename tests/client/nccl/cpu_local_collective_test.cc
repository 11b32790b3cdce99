// CpuLocalCollective: the all_gather's placement (in and out of place), the
// deferred execution a GPU stream would have, the device-memory checks that
// catch a pointer of the wrong device, and the transfer counts.
#include "client/nccl/cpu_local_collective.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

namespace fedgather {
namespace {

using ::testing::HasSubstr;

std::vector<uint8_t> Pattern(size_t size, uint8_t first) {
  std::vector<uint8_t> bytes(size);
  std::iota(bytes.begin(), bytes.end(), first);
  return bytes;
}

TEST(CpuLocalCollectiveTest, AllGatherPlacesDeviceGAtSlotGOnEveryDevice) {
  constexpr int kDevices = 3;
  constexpr int64_t kBytes = 5;
  CpuLocalCollective local(kDevices);
  std::vector<LocalBuffer> in, out;
  // Sources stay valid until Synchronize, as the contract asks.
  std::vector<std::vector<uint8_t>> mine;
  for (int g = 0; g < kDevices; ++g) {
    in.push_back(*local.AllocateDevice(g, kBytes));
    out.push_back(*local.AllocateDevice(g, kBytes * kDevices));
    mine.push_back(Pattern(kBytes, 10 * g));
    ASSERT_TRUE(
        local.CopyToDevice(g, in[g].data(), mine[g].data(), kBytes).ok());
  }
  // Out of place for tensor one; in place (device g sends its own slot).
  LocalAllGather op;
  op.bytes = kBytes;
  for (int g = 0; g < kDevices; ++g) {
    op.sends.push_back(in[g].data());
    op.recvs.push_back(out[g].data());
  }
  ASSERT_TRUE(local.AllGather({&op, 1}).ok());
  ASSERT_TRUE(local.Synchronize().ok());
  std::vector<uint8_t> expected;
  for (int g = 0; g < kDevices; ++g) {
    expected.insert(expected.end(), mine[g].begin(), mine[g].end());
  }
  for (int d = 0; d < kDevices; ++d) {
    std::vector<uint8_t> got(kBytes * kDevices);
    ASSERT_TRUE(
        local.CopyToHost(d, got.data(), out[d].data(), got.size()).ok());
    ASSERT_TRUE(local.Synchronize().ok());
    EXPECT_EQ(got, expected) << "device " << d;
  }

  // In place: clear every slot but the device's own, gather again.
  for (int d = 0; d < kDevices; ++d) {
    std::vector<uint8_t> own(kBytes * kDevices, 0);
    std::memcpy(own.data() + d * kBytes, expected.data() + d * kBytes, kBytes);
    ASSERT_TRUE(
        local.CopyToDevice(d, out[d].data(), own.data(), own.size()).ok());
    ASSERT_TRUE(local.Synchronize().ok());
    op.sends[d] = out[d].bytes_data() + d * kBytes;
  }
  ASSERT_TRUE(local.AllGather({&op, 1}).ok());
  ASSERT_TRUE(local.Synchronize().ok());
  for (int d = 0; d < kDevices; ++d) {
    std::vector<uint8_t> got(kBytes * kDevices);
    ASSERT_TRUE(
        local.CopyToHost(d, got.data(), out[d].data(), got.size()).ok());
    ASSERT_TRUE(local.Synchronize().ok());
    EXPECT_EQ(got, expected) << "in place, device " << d;
  }
  const LocalTransferStats stats = local.stats();
  EXPECT_EQ(stats.all_gathers, 2);
  EXPECT_EQ(stats.host_to_device_bytes,
            std::vector<int64_t>(kDevices, kBytes + kBytes * kDevices));
  EXPECT_EQ(stats.device_to_host_bytes,
            std::vector<int64_t>(kDevices, 2 * kBytes * kDevices));
}

TEST(CpuLocalCollectiveTest, WorkRunsOnlyInSynchronizeAsOnAStream) {
  CpuLocalCollective local(1);
  LocalBuffer dev = *local.AllocateDevice(0, 4);
  const std::vector<uint8_t> src = {1, 2, 3, 4};
  std::vector<uint8_t> back = {9, 9, 9, 9};
  ASSERT_TRUE(local.CopyToDevice(0, dev.data(), src.data(), 4).ok());
  ASSERT_TRUE(local.CopyToHost(0, back.data(), dev.data(), 4).ok());
  EXPECT_EQ(back, std::vector<uint8_t>({9, 9, 9, 9}));  // not yet run
  ASSERT_TRUE(local.Synchronize().ok());
  EXPECT_EQ(back, src);
}

TEST(CpuLocalCollectiveTest, PointersOfAnotherDeviceOrPastTheBufferAreRefused) {
  CpuLocalCollective local(2);
  LocalBuffer dev0 = *local.AllocateDevice(0, 8);
  LocalBuffer dev1 = *local.AllocateDevice(1, 8);
  std::vector<uint8_t> host(16);
  absl::Status wrong = local.CopyToDevice(1, dev0.data(), host.data(), 8);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(wrong.message()),
              HasSubstr("not memory of device 1"));
  EXPECT_EQ(local.CopyToDevice(0, dev0.data(), host.data(), 9).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(local.CopyToHost(0, host.data(), dev0.bytes_data() + 4, 5).code(),
            absl::StatusCode::kInvalidArgument);
  // A device pointer is not host memory.
  EXPECT_THAT(
      std::string(local.CopyToHost(0, dev1.data(), dev0.data(), 8).message()),
      HasSubstr("is memory of device 1"));
  EXPECT_EQ(local.AllocateDevice(2, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  // An all_gather whose receive buffer is too small for both slots.
  LocalBuffer send0 = *local.AllocateDevice(0, 8);
  LocalBuffer send1 = *local.AllocateDevice(1, 8);
  LocalAllGather op;
  op.bytes = 8;
  op.sends = {send0.data(), send1.data()};
  op.recvs = {dev0.data(), dev1.data()};
  EXPECT_THAT(std::string(local.AllGather({&op, 1}).message()),
              HasSubstr("all_gather receive"));
  op.sends.pop_back();
  EXPECT_THAT(std::string(local.AllGather({&op, 1}).message()),
              HasSubstr("got 1 send and 2 receive"));
  // Refused work was not enqueued: the first copy's bytes are unchanged.
  const std::vector<uint8_t> ones(8, 1);
  ASSERT_TRUE(local.CopyToDevice(0, dev0.data(), ones.data(), 8).ok());
  ASSERT_TRUE(local.CopyToHost(0, host.data(), dev0.data(), 8).ok());
  ASSERT_TRUE(local.Synchronize().ok());
  EXPECT_EQ(std::vector<uint8_t>(host.begin(), host.begin() + 8), ones);
  EXPECT_EQ(local.stats().all_gathers, 0);
}

TEST(CpuLocalCollectiveTest, OverlapOtherThanInPlaceIsRefused) {
  constexpr int64_t kBytes = 4;
  CpuLocalCollective local(2);
  std::vector<LocalBuffer> in, out;
  LocalAllGather op;
  op.bytes = kBytes;
  for (int g = 0; g < 2; ++g) {
    in.push_back(*local.AllocateDevice(g, kBytes));
    // Room before and after the receive buffer for sends that overlap it.
    out.push_back(*local.AllocateDevice(g, 4 * kBytes));
    op.sends.push_back(in[g].data());
    op.recvs.push_back(out[g].bytes_data() + kBytes);
  }
  ASSERT_TRUE(local.AllGather({&op, 1}).ok());
  // In place: device 1 sends its own slot.
  op.sends[1] = out[1].bytes_data() + 2 * kBytes;
  ASSERT_TRUE(local.AllGather({&op, 1}).ok());
  // Any other overlap: in the wrong slot, off by one, from before the
  // receive buffer and into it.
  for (int64_t offset : {int64_t{0}, kBytes + 1, 3 - kBytes}) {
    op.sends[1] = out[1].bytes_data() + kBytes + offset;
    const absl::Status overlap = local.AllGather({&op, 1});
    EXPECT_EQ(overlap.code(), absl::StatusCode::kInvalidArgument) << offset;
    EXPECT_THAT(std::string(overlap.message()),
                HasSubstr("on device 1: send buffer"))
        << offset;
  }
  // Adjacent is not overlapping.
  op.sends[1] = out[1].bytes_data();
  EXPECT_TRUE(local.AllGather({&op, 1}).ok());
  EXPECT_EQ(local.stats().all_gathers, 3);
}

TEST(CpuLocalCollectiveTest, ZeroByteAllGatherIsNoWorkAndNoError) {
  CpuLocalCollective local(2);
  LocalAllGather op;
  op.sends = {nullptr, nullptr};
  op.recvs = {nullptr, nullptr};
  EXPECT_TRUE(local.AllGather({&op, 1}).ok());
  EXPECT_TRUE(local.Synchronize().ok());
  EXPECT_EQ(local.stats().all_gathers, 0);
}

// Device 0 copies a device buffer to host memory that device 1 then copies
// up. Two CUDA streams do not order these; only an all_gather (every
// device's stream reaches it) does. A 0-byte all_gather is no such point.
TEST(CpuLocalCollectiveTest, OnlyAnAllGatherOrdersTwoDevicesStreams) {
  constexpr int64_t kBytes = 4;
  CpuLocalCollective local(2);
  LocalBuffer dev0 = *local.AllocateDevice(0, kBytes);
  LocalBuffer dev1 = *local.AllocateDevice(1, kBytes);
  LocalBuffer in0 = *local.AllocateDevice(0, 1);
  LocalBuffer in1 = *local.AllocateDevice(1, 1);
  LocalBuffer out0 = *local.AllocateDevice(0, 2);
  LocalBuffer out1 = *local.AllocateDevice(1, 2);
  LocalAllGather gather;
  gather.sends = {in0.data(), in1.data()};
  gather.recvs = {out0.data(), out1.data()};
  LocalAllGather empty = gather;
  empty.bytes = 0;
  const std::vector<uint8_t> ones(kBytes, 1), zeros(kBytes, 0);
  for (const LocalAllGather* between : {&empty, &gather}) {
    std::vector<uint8_t> host(kBytes, 0), back(kBytes, 9);
    ASSERT_TRUE(local.CopyToDevice(0, dev0.data(), ones.data(), kBytes).ok());
    ASSERT_TRUE(local.CopyToDevice(1, dev1.data(), zeros.data(), kBytes).ok());
    ASSERT_TRUE(local.Synchronize().ok());
    ASSERT_TRUE(local.CopyToHost(0, host.data(), dev0.data(), kBytes).ok());
    gather.bytes = 1;
    ASSERT_TRUE(local.AllGather({between, 1}).ok());
    ASSERT_TRUE(local.CopyToDevice(1, dev1.data(), host.data(), kBytes).ok());
    ASSERT_TRUE(local.CopyToHost(1, back.data(), dev1.data(), kBytes).ok());
    ASSERT_TRUE(local.Synchronize().ok());
    EXPECT_EQ(host, ones);
    EXPECT_EQ(back, between == &gather ? ones : zeros)
        << (between == &gather ? "after an all_gather" : "unordered");
  }
}

TEST(CpuLocalCollectiveTest, FreedDeviceMemoryIsNoLongerDeviceMemory) {
  CpuLocalCollective local(1);
  void* freed = nullptr;
  {
    LocalBuffer dev = *local.AllocateDevice(0, 16);
    freed = dev.data();
    LocalBuffer moved = std::move(dev);
    EXPECT_EQ(dev.data(), nullptr);
    EXPECT_EQ(moved.data(), freed);
  }
  const std::vector<uint8_t> src(16);
  EXPECT_EQ(local.CopyToDevice(0, freed, src.data(), 16).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedgather
