// `fedgather join --gpus 1` on a real GPU, end to end: RunJoin loads the
// NCCL module from next to this binary, as the CLI does from next to itself
// (the build links it there, the GPU bundle copies it), and gets an
// NcclLocalCollective from it; the input goes to the device, through the
// group over mutual TLS and back, and join reads the device's copy back and
// compares it. Part of client_nccl_gpu_test (ctest label `gpu`); skips
// without a CUDA device.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "client/cli/join_command.h"
#include "client/nccl/nccl_status.h"
#include "common/safetensors.h"
#include "tests/e2e/test_cluster.h"

namespace fedgather::testing {
namespace {

TEST(JoinGpusOnAGpuTest, OneGpuReturnsTheInputByteForByte) {
  const absl::StatusOr<int> devices = CudaDeviceCount();
  if (!devices.ok()) {
    GTEST_SKIP() << "no CUDA device: " << devices.status().message();
  }
  TestCluster cluster(1);
  // One slice for the one GPU; an odd size, an unaligned one, an empty one.
  const TensorSpec w{"w", DType::kF32, {1, 262147}};
  const TensorSpec b{"b", DType::kF16, {1, 7}};
  const TensorSpec e{"e", DType::kU8, {1, 0}};
  const std::vector<uint8_t> wdata = RandomBytes(ByteSize(w).value(), 61);
  const std::vector<uint8_t> bdata = RandomBytes(ByteSize(b).value(), 62);
  const ConstHostTensor tensors[] = {
      {w, wdata.data()}, {b, bdata.data()}, {e, nullptr}};
  const std::string in = cluster.dir() + "/in.safetensors";
  ASSERT_TRUE(WriteSafetensorsFile(in, tensors, {}).ok());

  cli::JoinCommandOptions options;
  options.server = cluster.address();
  options.tls_dir = cluster.dir() + "/" + TestCluster::Site(0);
  options.group = "demo";
  options.world_size = 1;
  options.gpus = 1;
  options.input = in;
  options.output = cluster.dir() + "/out.safetensors";
  options.timeout = absl::Seconds(60);
  const absl::Status joined = cli::RunJoin(options);
  ASSERT_TRUE(joined.ok()) << joined;

  absl::StatusOr<SafetensorsFile> out =
      SafetensorsFile::ReadFile(options.output);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->metadata().at("fedgather.gpus"), "1");
  ASSERT_EQ(out->tensors().size(), 3u);
  // Name order: b, e, w; one node of one GPU gives back [1, ...].
  EXPECT_EQ(out->tensors()[0].spec, b);
  EXPECT_EQ(out->tensors()[1].spec, e);
  EXPECT_EQ(out->tensors()[2].spec, w);
  EXPECT_EQ(std::vector<uint8_t>(out->tensors()[0].data.begin(),
                                 out->tensors()[0].data.end()),
            bdata);
  EXPECT_TRUE(out->tensors()[1].data.empty());
  EXPECT_EQ(std::vector<uint8_t>(out->tensors()[2].data.begin(),
                                 out->tensors()[2].data.end()),
            wdata);
}

}  // namespace
}  // namespace fedgather::testing
