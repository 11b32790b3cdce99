// The relay ops beyond all_gather, end to end over real mutual TLS on
// 127.0.0.1:0, one thread per rank, world sizes 2, 3 and 4: all_gather_bytes
// and broadcast, every rank's result checked byte for byte.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "client/client.h"
#include "common/status_macros.h"
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

// Issue 17, findings 1 and 2, over the wire: each rank cuts its upload its
// own way (the server's limit, a page, 1000 bytes, 24 bytes, odd sizes that
// end inside elements); all_reduce and all_gather give every rank the exact
// result, and the server stays up for the next round.
TEST_P(OpsTest, EveryRankMayCutItsUploadItsOwnWay) {
  const int world = GetParam();
  TestCluster cluster(world);
  Members members(cluster);
  const std::vector<int64_t> cuts = {0, 4096, 1000, 24, 1001, 3};
  // 70,001 I32 elements: 280,004 bytes, integers so sums are exact.
  const TensorSpec spec{"w", DType::kI32, {70001}};
  const TensorSpec half{"h", DType::kF16, {4097}};
  std::vector<std::vector<int32_t>> in(world, std::vector<int32_t>(70001));
  std::vector<std::vector<uint16_t>> halves(world, std::vector<uint16_t>(4097));
  std::vector<int32_t> sum(70001, 0);
  std::vector<uint16_t> max_half(4097, 0);
  for (int r = 0; r < world; ++r) {
    for (int i = 0; i < 70001; ++i) {
      in[r][i] = (i * 31 + r * 1000003) % 65521 - 30000;
      sum[i] += in[r][i];
    }
    for (int i = 0; i < 4097; ++i) {
      // Positive F16 values order like their bit patterns.
      halves[r][i] = static_cast<uint16_t>(0x3c00 + (i * 7 + r * 13) % 1000);
      max_half[i] = std::max(max_half[i], halves[r][i]);
    }
  }
  for (int round = 0; round < 2; ++round) {
    std::vector<std::vector<int32_t>> out(world, std::vector<int32_t>(70001));
    std::vector<std::vector<uint16_t>> out_half(world,
                                                std::vector<uint16_t>(4097));
    const std::vector<absl::Status> reduced = members.Run([&](int r) {
      CollectiveOptions options;
      options.upload_chunk_bytes = cuts[(r + round) % cuts.size()];
      const ConstHostTensor sums[] = {{spec, in[r].data()}};
      const MutableHostTensor sums_out[] = {{spec, out[r].data()}};
      FG_RETURN_IF_ERROR(
          members.groups[r]->AllReduce(sums, sums_out, v1::SUM, 1, options));
      options.upload_chunk_bytes = cuts[(r + round + 3) % cuts.size()];
      const ConstHostTensor maxes[] = {{half, halves[r].data()}};
      const MutableHostTensor maxes_out[] = {{half, out_half[r].data()}};
      return members.groups[r]->AllReduce(maxes, maxes_out, v1::MAX, 1,
                                          options);
    });
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(reduced[r].ok()) << "rank " << r << ": " << reduced[r];
      EXPECT_TRUE(out[r] == sum) << "rank " << r << " round " << round;
      EXPECT_TRUE(out_half[r] == max_half) << "rank " << r;
    }
    std::vector<std::vector<int32_t>> gathered(
        world, std::vector<int32_t>(static_cast<size_t>(world) * 70001));
    const std::vector<absl::Status> all = members.Run([&](int r) {
      CollectiveOptions options;
      options.upload_chunk_bytes = cuts[(r + round + 1) % cuts.size()];
      const ConstHostTensor mine[] = {{spec, in[r].data()}};
      const MutableHostTensor into[] = {
          {{"w", DType::kI32, {world, 70001}}, gathered[r].data()}};
      return members.groups[r]->AllGatherInto(mine, into, options);
    });
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(all[r].ok()) << "rank " << r << ": " << all[r];
      for (int src = 0; src < world; ++src) {
        EXPECT_TRUE(std::equal(in[src].begin(), in[src].end(),
                               gathered[r].begin() + src * 70001))
            << "rank " << r << " from " << src;
      }
    }
  }
}

TEST(OpsErrorTest, AnUploadChunkSizeOverTheLimitIsRefusedLocally) {
  TestCluster cluster(2);
  Members members(cluster);
  int32_t value = 1;
  const ConstHostTensor in[] = {{{"x", DType::kI32, {1}}, &value}};
  int32_t out = 0;
  const MutableHostTensor into[] = {{{"x", DType::kI32, {1}}, &out}};
  CollectiveOptions options;
  options.upload_chunk_bytes = (1 << 20) + 1;
  const absl::Status refused =
      members.groups[0]->AllReduce(in, into, v1::SUM, 1, options);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("upload_chunk_bytes 1048577 must be 0 (the server's "
                        "chunk limit) or 1 to 1048576"));
  // Nothing was sent, so nothing was spent: the group goes on.
  members.ExpectNextRoundWorks();
}

}  // namespace
}  // namespace fedgather::testing
