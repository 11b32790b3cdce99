// End-to-end all_gather over real mutual TLS on 127.0.0.1:0: one thread per
// rank, every rank's output checked byte for byte.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "client/client.h"
#include "client/provision.h"
#include "tests/e2e/test_cluster.h"

namespace fedgather::testing {
namespace {

// One rank's inputs: tensors of several dtypes and shapes, and their bytes.
struct RankInputs {
  std::vector<TensorSpec> specs;
  std::vector<std::vector<uint8_t>> bytes;

  std::vector<ConstHostTensor> Views() const {
    std::vector<ConstHostTensor> views;
    for (size_t i = 0; i < specs.size(); ++i) {
      views.push_back({specs[i], bytes[i].data()});
    }
    return views;
  }
};

RankInputs MakeInputs(int rank, const std::vector<TensorSpec>& specs) {
  RankInputs in;
  in.specs = specs;
  for (size_t i = 0; i < specs.size(); ++i) {
    in.bytes.push_back(RandomBytes(ByteSize(specs[i]).value(),
                                   static_cast<uint32_t>(rank * 1000 + i)));
  }
  return in;
}

// Gathered output buffers for `specs` at world size `world`.
struct Outputs {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<MutableHostTensor> views;

  Outputs(const std::vector<TensorSpec>& specs, int world) {
    for (const TensorSpec& spec : specs) {
      bytes.emplace_back(ByteSize(spec).value() * world, 0xEE);
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      MutableHostTensor view{specs[i], bytes[i].data()};
      view.spec.shape.insert(view.spec.shape.begin(), world);
      views.push_back(view);
    }
  }
};

// Runs one all_gather of `specs` on every rank and checks every output, and
// that each epoch names contributions by `digest`.
void GatherAndCheck(const TestCluster& cluster,
                    const std::vector<TensorSpec>& specs,
                    DigestAlgorithm digest = DigestAlgorithm::kBlake3) {
  const int world = cluster.participants();
  std::vector<RankInputs> inputs(world);
  std::vector<std::unique_ptr<Outputs>> outputs(world);
  std::vector<int> rank_of(world, -1);
  RunRanks(world, [&](int i) {
    std::unique_ptr<Client> client = cluster.Connect(TestCluster::Site(i));
    absl::StatusOr<std::unique_ptr<Group>> group =
        client->Join({"demo", world, std::nullopt, absl::Seconds(30)});
    ASSERT_TRUE(group.ok()) << group.status();
    const int rank = (*group)->rank();
    EXPECT_EQ((*group)->digest_algorithm(), digest);
    rank_of[i] = rank;
    inputs[i] = MakeInputs(rank, specs);
    outputs[i] = std::make_unique<Outputs>(specs, world);
    const absl::Status gathered =
        (*group)->AllGatherInto(inputs[i].Views(), outputs[i]->views);
    ASSERT_TRUE(gathered.ok()) << gathered;
  });
  std::vector<int> site_of_rank(world, -1);
  for (int i = 0; i < world; ++i) {
    ASSERT_GE(rank_of[i], 0);
    site_of_rank[rank_of[i]] = i;
  }
  for (int i = 0; i < world; ++i) {
    for (size_t t = 0; t < specs.size(); ++t) {
      const size_t part = ByteSize(specs[t]).value();
      for (int r = 0; r < world; ++r) {
        const std::vector<uint8_t>& expected = inputs[site_of_rank[r]].bytes[t];
        ASSERT_EQ(0, part == 0
                         ? 0
                         : std::memcmp(outputs[i]->bytes[t].data() + r * part,
                                       expected.data(), part))
            << "site " << i << " tensor " << specs[t].name << " rank " << r;
      }
    }
  }
}

class AllGatherWorldTest : public ::testing::TestWithParam<int> {};

TEST_P(AllGatherWorldTest, EveryRankGetsEveryContributionInRankOrder) {
  ClusterOptions options;
  options.participants = GetParam();
  TestCluster cluster(options);
  GatherAndCheck(cluster, {{"weight", DType::kF32, {33, 65}},
                           {"bias", DType::kBF16, {7}},
                           {"step", DType::kI64, {}},
                           {"mask", DType::kBool, {3, 1, 2}}});
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, AllGatherWorldTest,
                         ::testing::Values(2, 4, 8));

TEST(AllGatherTest, SixtyFourMiBTensorSpansManyChunks) {
  ClusterOptions options;
  options.participants = 2;
  // A small round buffer forces backpressure on the uploads.
  options.limits.max_buffered_bytes_per_round = 4 << 20;
  TestCluster cluster(options);
  GatherAndCheck(cluster, {{"big", DType::kF32, {16, 1 << 20}}});
}

// A group whose policy says `digest: sha256`: the epoch announces it, every
// rank checks the commit's SHA-256 digests, and the server's commit says so.
TEST(AllGatherTest, AGroupOfSha256DigestsGathersAndCommitsInSha256) {
  ClusterOptions options;
  options.participants = 3;
  options.group_extra = "    digest: sha256\n";
  TestCluster cluster(options);
  GatherAndCheck(cluster, {{"weight", DType::kF32, {1000}}},
                 DigestAlgorithm::kSha256);
  EXPECT_TRUE(cluster.events().WaitFor(
      [](const server::ServerEvent& e) {
        return e.kind == server::EventKind::kRoundCompleted &&
               e.digest_algorithm == "sha256" && e.contributions.size() == 3;
      },
      absl::Seconds(10)));
}

TEST(AllGatherTest, ZeroElementTensor) {
  ClusterOptions options;
  options.participants = 2;
  TestCluster cluster(options);
  GatherAndCheck(cluster,
                 {{"empty", DType::kF32, {0, 5}}, {"one", DType::kU8, {1}}});
}

TEST(AllGatherTest, RanksFollowRequestsThenSortedIdentities) {
  ClusterOptions options;
  options.participants = 4;
  TestCluster cluster(options);
  // site-3 asks for rank 0; the others are assigned by sorted identity.
  std::vector<int> ranks(4, -1);
  std::vector<std::vector<std::string>> identities(4);
  // Members stay until every thread has joined: one that left at once would
  // end the epoch before the others had read their Joined.
  std::vector<std::unique_ptr<Client>> clients(4);
  std::vector<std::unique_ptr<Group>> groups(4);
  RunRanks(4, [&](int i) {
    clients[i] = cluster.Connect(TestCluster::Site(i));
    JoinOptions join{"demo", 4, std::nullopt, absl::Seconds(30)};
    if (i == 2) join.rank = 0;
    auto group = clients[i]->Join(join);
    ASSERT_TRUE(group.ok()) << group.status();
    ranks[i] = (*group)->rank();
    identities[i] = (*group)->identities();
    groups[i] = *std::move(group);
  });
  EXPECT_EQ(ranks, (std::vector<int>{1, 2, 0, 3}));
  const std::vector<std::string> expected = {
      ParticipantIdentity("site-3"), ParticipantIdentity("site-1"),
      ParticipantIdentity("site-2"), ParticipantIdentity("site-4")};
  for (const auto& seen : identities) EXPECT_EQ(seen, expected);
}

TEST(AllGatherTest, ManyRoundsInOneGroupAndAllGatherV) {
  ClusterOptions options;
  options.participants = 3;
  TestCluster cluster(options);
  RunRanks(3, [&](int i) {
    std::unique_ptr<Client> client = cluster.Connect(TestCluster::Site(i));
    auto group = client->Join({"demo", 3, i, absl::Seconds(30)});
    ASSERT_TRUE(group.ok()) << group.status();
    for (int round = 0; round < 5; ++round) {
      std::vector<int32_t> mine(4, i * 100 + round);
      std::vector<int32_t> out(12, -1);
      ConstHostTensor in{{"x", DType::kI32, {4}}, mine.data()};
      MutableHostTensor gathered{{"x", DType::kI32, {3, 4}}, out.data()};
      ASSERT_TRUE((*group)->AllGatherInto({&in, 1}, {&gathered, 1}).ok());
      for (int r = 0; r < 3; ++r) {
        for (int k = 0; k < 4; ++k) ASSERT_EQ(out[r * 4 + k], r * 100 + round);
      }
    }
    // all_gather_v: rank r contributes r + 1 rows of 2 floats.
    std::vector<float> rows(2 * (i + 1));
    for (size_t k = 0; k < rows.size(); ++k) rows[k] = i * 10.0f + k;
    ConstHostTensor in{{"rows", DType::kF32, {i + 1, 2}}, rows.data()};
    std::vector<std::vector<float>> parts(3);
    std::vector<std::vector<int64_t>> shapes(3);
    const absl::Status v = (*group)->AllGatherV(
        {&in, 1},
        [&](int rank, int, const TensorSpec& spec) -> absl::StatusOr<void*> {
          shapes[rank] = spec.shape;
          parts[rank].resize(ByteSize(spec).value() / sizeof(float));
          return parts[rank].data();
        });
    ASSERT_TRUE(v.ok()) << v;
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(shapes[r], (std::vector<int64_t>{r + 1, 2}));
      ASSERT_EQ(parts[r].size(), static_cast<size_t>(2 * (r + 1)));
      for (size_t k = 0; k < parts[r].size(); ++k) {
        EXPECT_EQ(parts[r][k], r * 10.0f + k);
      }
    }
  });
}

}  // namespace
}  // namespace fedgather::testing
