// The torch::Tensor adapter of Group, end to end over mutual TLS.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>

#include "client/client.h"
#include "tests/e2e/test_cluster.h"

namespace fedgather::testing {
namespace {

TEST(GroupTorchTest, AllGatherVariantsAndBroadcastMatchTorch) {
  TestCluster cluster(ClusterOptions(3));
  RunRanks(3, [&](int i) {
    std::unique_ptr<Client> client = cluster.Connect(TestCluster::Site(i));
    auto group = client->Join({"demo", 3, i, absl::Seconds(30)});
    ASSERT_TRUE(group.ok()) << group.status();
    std::vector<at::Tensor> all;
    for (int r = 0; r < 3; ++r) {
      all.push_back(at::arange(12, at::kFloat).reshape({3, 4}) * (r + 1));
    }
    const at::Tensor expected = at::stack(all);

    // One tensor in, [world, *shape] out.
    auto gathered = (*group)->AllGather(all[i]);
    ASSERT_TRUE(gathered.ok()) << gathered.status();
    EXPECT_TRUE(at::equal(*gathered, expected));

    // Into a caller-allocated output.
    at::Tensor out = at::zeros({3, 3, 4}, at::kFloat);
    ASSERT_TRUE((*group)->AllGatherInto(all[i], out).ok());
    EXPECT_TRUE(at::equal(out, expected));

    // A name -> tensor map of several dtypes, including a 0-element tensor.
    std::map<std::string, at::Tensor> inputs = {
        {"w", all[i].to(at::kBFloat16)},
        {"count", at::full({}, int64_t{10 + i}, at::kLong)},
        {"empty", at::empty({0, 2}, at::kInt)}};
    auto map = (*group)->AllGather(inputs);
    ASSERT_TRUE(map.ok()) << map.status();
    EXPECT_TRUE(at::equal(map->at("w"), expected.to(at::kBFloat16)));
    EXPECT_TRUE(at::equal(map->at("count"), at::arange(10, 13, at::kLong)));
    EXPECT_EQ(map->at("empty").sizes(), (at::IntArrayRef{3, 0, 2}));

    // all_gather_v: rank r sends r + 1 rows.
    auto parts =
        (*group)->AllGatherV(at::full({i + 1, 2}, double(i), at::kDouble));
    ASSERT_TRUE(parts.ok()) << parts.status();
    ASSERT_EQ(parts->size(), 3u);
    for (int r = 0; r < 3; ++r) {
      EXPECT_TRUE(
          at::equal((*parts)[r], at::full({r + 1, 2}, double(r), at::kDouble)));
    }

    // broadcast from rank 1, in place, as torch.distributed.broadcast.
    at::Tensor mine = at::full({4, 3}, float(i), at::kHalf);
    ASSERT_TRUE((*group)->Broadcast(mine, 1).ok());
    EXPECT_TRUE(at::equal(mine, at::full({4, 3}, 1.0, at::kHalf)));

    // A non-contiguous input is refused locally with a clear error.
    auto strided = (*group)->AllGather(all[i].t());
    EXPECT_EQ(strided.status().code(), absl::StatusCode::kInvalidArgument);
  });
}

}  // namespace
}  // namespace fedgather::testing
