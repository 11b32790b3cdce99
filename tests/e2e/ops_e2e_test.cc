// The relay ops beyond all_gather, end to end over real mutual TLS on
// 127.0.0.1:0, one thread per rank, world sizes 2, 3 and 4: all_gather_bytes
// and broadcast, every rank's result checked byte for byte.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "client/client.h"
#include "tests/e2e/test_cluster.h"

namespace fedgather::testing {
namespace {

using ::testing::HasSubstr;

class OpsTest : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(WorldSizes, OpsTest, ::testing::Values(2, 3, 4));

// Rank r's byte string: r * 1000 + 1 arbitrary bytes (NULs included), and
// an empty one for the last rank.
std::string BytesOf(int rank, int world) {
  if (rank == world - 1) return "";
  const std::vector<uint8_t> bytes = RandomBytes(rank * 1000 + 1, 77 + rank);
  return std::string(bytes.begin(), bytes.end());
}

TEST_P(OpsTest, AllGatherBytesReturnsEveryRanksStringAsSent) {
  const int world = GetParam();
  TestCluster cluster(world);
  Members members(cluster);
  for (int round = 0; round < 2; ++round) {
    std::vector<absl::StatusOr<std::vector<std::string>>> got(world);
    RunRanks(world, [&](int r) {
      got[r] = members.groups[r]->AllGatherBytes(BytesOf(r, world));
    });
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(got[r].ok()) << got[r].status();
      ASSERT_EQ(got[r]->size(), static_cast<size_t>(world));
      for (int src = 0; src < world; ++src) {
        EXPECT_EQ((*got[r])[src], BytesOf(src, world))
            << "rank " << r << " from " << src;
      }
    }
  }
}

// The tensors every broadcast test sends: each dtype, and an empty one.
std::vector<TensorSpec> BroadcastSpecs() {
  return {{"f32", DType::kF32, {3, 5}},    {"f64", DType::kF64, {7}},
          {"f16", DType::kF16, {4, 2}},    {"bf16", DType::kBF16, {9}},
          {"i64", DType::kI64, {2, 2, 2}}, {"i32", DType::kI32, {300000}},
          {"empty", DType::kF32, {0, 4}}};
}

TEST_P(OpsTest, BroadcastGivesEveryRankTheRootsBytes) {
  const int world = GetParam();
  TestCluster cluster(world);
  Members members(cluster);
  const std::vector<TensorSpec> specs = BroadcastSpecs();
  for (int root : {world - 1, 0}) {
    // Every rank starts with its own random bytes; all must end with root's.
    std::vector<std::vector<std::vector<uint8_t>>> data(world);
    std::vector<std::vector<MutableHostTensor>> views(world);
    for (int r = 0; r < world; ++r) {
      for (size_t i = 0; i < specs.size(); ++i) {
        data[r].push_back(
            RandomBytes(ByteSize(specs[i]).value(), r * 100 + i + root * 7));
      }
      for (size_t i = 0; i < specs.size(); ++i) {
        views[r].push_back({specs[i], data[r][i].data()});
      }
    }
    const std::vector<std::vector<uint8_t>> expected = data[root];
    for (const absl::Status& s : members.Run([&](int r) {
           return members.groups[r]->Broadcast(views[r], root);
         })) {
      ASSERT_TRUE(s.ok()) << s;
    }
    for (int r = 0; r < world; ++r) {
      for (size_t i = 0; i < specs.size(); ++i) {
        EXPECT_EQ(data[r][i], expected[i])
            << "rank " << r << " tensor " << specs[i].name << " root " << root;
      }
    }
  }
}

TEST(OpsErrorTest, BroadcastRootsOrShapesThatDisagreeFailEveryRank) {
  TestCluster cluster(3);
  Members members(cluster);
  std::vector<std::vector<float>> data(3, std::vector<float>(4, 1.0f));
  const std::vector<absl::Status> roots = members.Run([&](int r) {
    MutableHostTensor t{{"w", DType::kF32, {4}}, data[r].data()};
    return members.groups[r]->Broadcast({&t, 1}, r == 2 ? 1 : 0);
  });
  ExpectSameStatusEverywhere(roots, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(roots[0].message()), HasSubstr("names root"));
  const std::vector<absl::Status> shapes = members.Run([&](int r) {
    MutableHostTensor t{{"w", DType::kF32, {r == 1 ? 2 : 4}}, data[r].data()};
    return members.groups[r]->Broadcast({&t, 1}, 0);
  });
  ExpectSameStatusEverywhere(shapes, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(shapes[0].message()), HasSubstr("shape"));
  // A root out of range is refused locally and spends no seq.
  MutableHostTensor t{{"w", DType::kF32, {4}}, data[0].data()};
  EXPECT_EQ(members.groups[0]->Broadcast({&t, 1}, 3).code(),
            absl::StatusCode::kInvalidArgument);
  members.ExpectNextRoundWorks();
}

}  // namespace
}  // namespace fedgather::testing
