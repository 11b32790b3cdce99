// The hierarchical all_gather (client/nccl/hierarchical_all_gather.h) with
// CpuLocalCollective, against a real fedgather-server over mutual TLS: N
// nodes of G emulated devices for G in {1, 2, 4} and N in {1, 2, 3}, every
// device's and every host's result checked byte for byte against every
// global rank's input, and the PCIe traffic each device would have; the
// unique-id distribution's failure path; `fedgather join --gpus`.
#include "client/nccl/hierarchical_all_gather.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli/join_command.h"
#include "client/nccl/cpu_local_collective.h"
#include "client/nccl/unique_id.h"
#include "common/safetensors.h"
#include "fedgather/config.h"
#include "tests/client/nccl/fake_nccl_modules.h"
#include "tests/e2e/test_cluster.h"
#if FEDGATHER_HAVE_NCCL
#include "client/nccl/nccl_status.h"
#endif

namespace fedgather::testing {
namespace {

using ::testing::HasSubstr;

// The tensors each global rank contributes: several dtypes, one of several
// chunks with an odd size, and an empty one.
std::vector<TensorSpec> Specs() {
  return {{"w", DType::kF32, {3, 5}},
          {"b", DType::kBF16, {7}},
          {"i", DType::kI64, {2, 2, 2}},
          {"big", DType::kU8, {1300001}},
          {"empty", DType::kF32, {0, 4}}};
}

// The bytes global rank `rank` contributes as tensor `t` in round `round`.
std::vector<uint8_t> InputOf(int rank, size_t t, int round) {
  const TensorSpec spec = Specs()[t];
  return RandomBytes(ByteSize(spec).value(), rank * 131 + t * 7 + round * 1000);
}

// One node: its emulated devices, their input and output memory.
struct Node {
  std::unique_ptr<CpuLocalCollective> local;
  std::vector<LocalBuffer> memory;
  std::vector<std::vector<ConstDeviceTensor>> in;
  std::vector<std::vector<MutableDeviceTensor>> out;

  // Node `node` of `world` with `devices` devices, holding round `round`'s
  // inputs on its devices.
  Node(int node, int world, int devices, int round)
      : local(std::make_unique<CpuLocalCollective>(devices)),
        in(devices),
        out(devices) {
    const std::vector<TensorSpec> specs = Specs();
    for (int g = 0; g < devices; ++g) {
      for (size_t t = 0; t < specs.size(); ++t) {
        const int64_t bytes = ByteSize(specs[t]).value();
        LocalBuffer input = *local->AllocateDevice(g, bytes);
        LocalBuffer output = *local->AllocateDevice(g, bytes * world * devices);
        const std::vector<uint8_t> data = InputOf(node * devices + g, t, round);
        EXPECT_TRUE(
            local->CopyToDevice(g, input.data(), data.data(), bytes).ok());
        EXPECT_TRUE(local->Synchronize().ok());  // before `data` goes
        TensorSpec gathered = specs[t];
        gathered.shape.insert(gathered.shape.begin(), int64_t{world} * devices);
        in[g].push_back({specs[t], input.data()});
        out[g].push_back({gathered, output.data()});
        memory.push_back(std::move(input));
        memory.push_back(std::move(output));
      }
    }
  }

  // DeviceResult reads device g's output t back.
  std::vector<uint8_t> DeviceResult(int g, size_t t, int64_t bytes) {
    std::vector<uint8_t> got(static_cast<size_t>(bytes));
    EXPECT_TRUE(local->CopyToHost(g, got.data(), out[g][t].data, bytes).ok());
    EXPECT_TRUE(local->Synchronize().ok());
    return got;
  }
};

// Expected result of tensor t: every global rank's input in order.
std::vector<uint8_t> Expected(int ranks, size_t t, int round) {
  std::vector<uint8_t> all;
  for (int r = 0; r < ranks; ++r) {
    const std::vector<uint8_t> part = InputOf(r, t, round);
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

class HierarchicalTest : public ::testing::TestWithParam<std::tuple<int, int>> {
};

INSTANTIATE_TEST_SUITE_P(
    DevicesAndNodes, HierarchicalTest,
    ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Values(1, 2, 3)),
    [](const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
      return absl::StrCat("G", std::get<0>(info.param), "_N",
                          std::get<1>(info.param));
    });

TEST_P(HierarchicalTest, EveryDeviceAndHostHoldsEveryGlobalRankInOrder) {
  const auto [devices, world] = GetParam();
  const int ranks = devices * world;
  const std::vector<TensorSpec> specs = Specs();
  int64_t rank_bytes = 0;  // one global rank's contribution, all tensors
  for (const TensorSpec& s : specs) rank_bytes += ByteSize(s).value();

  TestCluster cluster(world);
  Members members(cluster);
  for (int round = 0; round < 2; ++round) {
    std::vector<std::unique_ptr<Node>> nodes;
    for (int n = 0; n < world; ++n) {
      nodes.push_back(std::make_unique<Node>(n, world, devices, round));
    }
    std::vector<LocalTransferStats> before;
    for (auto& node : nodes) before.push_back(node->local->stats());
    std::vector<absl::StatusOr<DeviceGatherResult>> results(world);
    RunRanks(world, [&](int n) {
      results[n] = AllGatherToDevices(*members.groups[n], *nodes[n]->local,
                                      nodes[n]->in, nodes[n]->out);
    });
    for (int n = 0; n < world; ++n) {
      ASSERT_TRUE(results[n].ok())
          << "node " << n << ": " << results[n].status();
      const LocalTransferStats after = nodes[n]->local->stats();
      for (int g = 0; g < devices; ++g) {
        // Each device copies its own input down once and 1/G of the other
        // nodes' blocks up: never the whole remote result.
        EXPECT_EQ(
            after.device_to_host_bytes[g] - before[n].device_to_host_bytes[g],
            rank_bytes)
            << "node " << n << " device " << g;
        EXPECT_EQ(
            after.host_to_device_bytes[g] - before[n].host_to_device_bytes[g],
            int64_t{world - 1} * rank_bytes)
            << "node " << n << " device " << g;
      }
      for (size_t t = 0; t < specs.size(); ++t) {
        const std::vector<uint8_t> expected = Expected(ranks, t, round);
        const ConstHostTensor& host = results[n]->tensors[t];
        TensorSpec spec = specs[t];
        spec.shape.insert(spec.shape.begin(), ranks);
        EXPECT_EQ(host.spec, spec);
        ASSERT_EQ(results[n]->buffers[t].bytes(),
                  static_cast<int64_t>(expected.size()));
        // (An empty tensor's data may be null: no memcmp on it.)
        const auto* data = static_cast<const uint8_t*>(host.data);
        EXPECT_EQ(std::vector<uint8_t>(data, data + expected.size()), expected)
            << "host of node " << n << " tensor " << specs[t].name;
        for (int g = 0; g < devices; ++g) {
          EXPECT_EQ(nodes[n]->DeviceResult(g, t, expected.size()), expected)
              << "round " << round << " node " << n << " device " << g
              << " tensor " << specs[t].name;
        }
      }
    }
  }
}

TEST(HierarchicalErrorTest, NodesWithDifferentDeviceCountsFailEveryNode) {
  TestCluster cluster(2);
  Members members(cluster);
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.push_back(std::make_unique<Node>(0, 2, 2, 0));
  nodes.push_back(std::make_unique<Node>(1, 2, 1, 0));
  std::vector<absl::Status> statuses = members.Run([&](int n) {
    return AllGatherToDevices(*members.groups[n], *nodes[n]->local,
                              nodes[n]->in, nodes[n]->out)
        .status();
  });
  // Node 1's outputs are sized for its own G, so the network step is where
  // the node blocks ([2, ...] against [1, ...]) disagree.
  ExpectSameStatusEverywhere(statuses, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(statuses[0].message()), HasSubstr("shape"));
  members.ExpectNextRoundWorks();
}

TEST(HierarchicalErrorTest, LocalArgumentErrorsSendNothing) {
  TestCluster cluster(1);
  Members members(cluster);
  Node node(0, 1, 2, 0);
  // An output of the wrong size on device 1.
  std::vector<std::vector<MutableDeviceTensor>> bad_out = node.out;
  bad_out[1][0].spec.shape[0] = 3;
  absl::Status status =
      AllGatherToDevices(*members.groups[0], *node.local, node.in, bad_out)
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("device 1's output 0 is w:F32[3, 3, 5]"));
  // Inputs for one device of two.
  status = AllGatherToDevices(*members.groups[0], *node.local,
                              {node.in.data(), 1}, node.out)
               .status();
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("2 local devices but inputs for 1"));
  // No seq was spent: the next round of the group works.
  members.ExpectNextRoundWorks();
}

TEST(ShareFromRankZeroTest, EveryRankGetsRankZerosBytes) {
  TestCluster cluster(3);
  Members members(cluster);
  NcclUniqueIdBytes made;
  for (size_t i = 0; i < made.size(); ++i)
    made[i] = static_cast<uint8_t>(i * 7);
  std::vector<absl::StatusOr<NcclUniqueIdBytes>> got(3);
  RunRanks(3, [&](int r) {
    got[r] = ShareFromRankZero(
        *members.groups[r], [&, r]() -> absl::StatusOr<NcclUniqueIdBytes> {
          EXPECT_EQ(r, 0) << "only rank 0 creates the id";
          return made;
        });
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(got[r].ok()) << got[r].status();
    EXPECT_EQ(*got[r], made) << "rank " << r;
  }
}

TEST(ShareFromRankZeroTest, RankZerosFailureFailsEveryRankWithItsReason) {
  TestCluster cluster(2);
  Members members(cluster);
  std::vector<absl::Status> statuses = members.Run([&](int r) {
    return ShareFromRankZero(*members.groups[r],
                             []() -> absl::StatusOr<NcclUniqueIdBytes> {
                               return absl::UnavailableError("no interface");
                             })
        .status();
  });
  ExpectSameStatusEverywhere(statuses, absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(statuses[1].message()),
              HasSubstr("rank 0 (spiffe://fedgather/site-1) could not create "
                        "the id: UNAVAILABLE: no interface"));
  members.ExpectNextRoundWorks();
}

// `fedgather join --gpus 2` on two nodes, with --emulate-gpus or with GPUs
// from an NCCL module (a stand-in over CpuLocalCollective): the output holds
// [4, ...] with node n's slice g at row 2n + g.
class JoinGpusTest : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(EmulatedOrFromAModule, JoinGpusTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "FromAModule" : "Emulated";
                         });

TEST_P(JoinGpusTest, GpusWriteEveryGlobalRankInOrder) {
  const bool from_module = GetParam();
  constexpr int kNodes = 2, kGpus = 2;
  TestCluster cluster(kNodes);
  const TensorSpec w{"w", DType::kF32, {kGpus, 3}};
  const TensorSpec idx{"idx", DType::kI32, {kGpus, 2, 2}};
  std::vector<std::vector<uint8_t>> wdata, idata;
  for (int n = 0; n < kNodes; ++n) {
    wdata.push_back(RandomBytes(ByteSize(w).value(), 40 + n));
    idata.push_back(RandomBytes(ByteSize(idx).value(), 50 + n));
    const ConstHostTensor tensors[] = {{w, wdata[n].data()},
                                       {idx, idata[n].data()}};
    ASSERT_TRUE(
        WriteSafetensorsFile(
            absl::StrCat(cluster.dir(), "/in-", n, ".safetensors"), tensors, {})
            .ok());
  }
  std::vector<absl::Status> statuses(kNodes);
  RunRanks(kNodes, [&](int n) {
    cli::JoinCommandOptions options;
    options.server = cluster.address();
    options.tls_dir = cluster.dir() + "/" + TestCluster::Site(n);
    options.group = "demo";
    options.world_size = kNodes;
    options.rank = n;
    options.gpus = kGpus;
    options.emulate_gpus = !from_module;
    if (from_module) options.nccl_module = NextToThisTest(kFakeNcclModule);
    options.input = absl::StrCat(cluster.dir(), "/in-", n, ".safetensors");
    options.output = absl::StrCat(cluster.dir(), "/out-", n, ".safetensors");
    options.timeout = absl::Seconds(60);
    statuses[n] = cli::RunJoin(options);
  });
  std::vector<uint8_t> wall, iall;
  for (int n = 0; n < kNodes; ++n) {
    ASSERT_TRUE(statuses[n].ok()) << statuses[n];
    wall.insert(wall.end(), wdata[n].begin(), wdata[n].end());
    iall.insert(iall.end(), idata[n].begin(), idata[n].end());
  }
  for (int n = 0; n < kNodes; ++n) {
    absl::StatusOr<SafetensorsFile> out = SafetensorsFile::ReadFile(
        absl::StrCat(cluster.dir(), "/out-", n, ".safetensors"));
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->tensors().size(), 2u);
    // Name order: idx, w.
    const SafetensorsEntry& i = out->tensors()[0];
    const SafetensorsEntry& wt = out->tensors()[1];
    EXPECT_EQ(i.spec, (TensorSpec{"idx", DType::kI32, {kNodes * kGpus, 2, 2}}));
    EXPECT_EQ(wt.spec, (TensorSpec{"w", DType::kF32, {kNodes * kGpus, 3}}));
    EXPECT_EQ(std::vector<uint8_t>(i.data.begin(), i.data.end()), iall);
    EXPECT_EQ(std::vector<uint8_t>(wt.data.begin(), wt.data.end()), wall);
    EXPECT_EQ(out->metadata().at("fedgather.gpus"), "2");
    EXPECT_EQ(out->metadata().at("fedgather.rank.1"),
              "spiffe://fedgather/site-2");
  }
}

TEST(JoinGpusErrorTest, InputsThatAreNotOneSlicePerGpuAreRefused) {
  TestCluster cluster(1);
  const TensorSpec w{"w", DType::kF32, {3, 3}};
  const std::vector<uint8_t> data(ByteSize(w).value());
  const ConstHostTensor tensor{w, data.data()};
  const std::string in = cluster.dir() + "/in.safetensors";
  ASSERT_TRUE(WriteSafetensorsFile(in, {&tensor, 1}, {}).ok());
  cli::JoinCommandOptions options;
  options.server = cluster.address();
  options.tls_dir = cluster.dir() + "/site-1";
  options.group = "demo";
  options.world_size = 1;
  options.gpus = 2;
  options.emulate_gpus = true;
  options.input = in;
  options.output = cluster.dir() + "/out.safetensors";
  options.timeout = absl::Seconds(30);
  const absl::Status status = cli::RunJoin(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("w:F32[3, 3] must be [2, ...]"));
  options.op = "all_reduce";
  EXPECT_THAT(std::string(cli::RunJoin(options).message()),
              HasSubstr("with all_gather"));
}

// Without GPUs `--gpus` without `--emulate-gpus` says why, through the
// build's NCCL module, and names the emulation (on a machine with two GPUs
// it would run; that is the gpu tests' business).
TEST(JoinGpusErrorTest, RealGpusWithoutDevicesSayWhy) {
#if FEDGATHER_HAVE_NCCL
  if (CudaDeviceCount().ok()) {
    GTEST_SKIP() << "this machine has CUDA devices";
  }
#endif
  cli::JoinCommandOptions options;
  options.server = "127.0.0.1:1";
  options.tls_dir = "/nonexistent";
  options.group = "demo";
  options.world_size = 1;
  options.gpus = 2;
  options.input = "/nonexistent.safetensors";
  options.output = "/nonexistent-out.safetensors";
  const absl::Status status = cli::RunJoin(options);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("--gpus 2: "));
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("--emulate-gpus runs the same path"));
#if FEDGATHER_HAVE_NCCL
  EXPECT_THAT(std::string(status.message()), HasSubstr("cudaGetDeviceCount"));
#else
  EXPECT_THAT(std::string(status.message()), HasSubstr("without NCCL"));
#endif
}

}  // namespace
}  // namespace fedgather::testing
