// The torch::Tensor adapter of Group (client/torch/torch_collectives.h),
// end to end over mutual TLS.
#include "client/torch/torch_collectives.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
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
    auto gathered = client::torch::AllGather(**group, all[i]);
    ASSERT_TRUE(gathered.ok()) << gathered.status();
    EXPECT_TRUE(at::equal(*gathered, expected));

    // Into a caller-allocated output.
    at::Tensor out = at::zeros({3, 3, 4}, at::kFloat);
    ASSERT_TRUE(client::torch::AllGatherInto(**group, all[i], out).ok());
    EXPECT_TRUE(at::equal(out, expected));

    // A name -> tensor map of several dtypes, including a 0-element tensor.
    std::map<std::string, at::Tensor> inputs = {
        {"w", all[i].to(at::kBFloat16)},
        {"count", at::full({}, int64_t{10 + i}, at::kLong)},
        {"empty", at::empty({0, 2}, at::kInt)}};
    auto map = client::torch::AllGather(**group, inputs);
    ASSERT_TRUE(map.ok()) << map.status();
    EXPECT_TRUE(at::equal(map->at("w"), expected.to(at::kBFloat16)));
    EXPECT_TRUE(at::equal(map->at("count"), at::arange(10, 13, at::kLong)));
    EXPECT_EQ(map->at("empty").sizes(), (at::IntArrayRef{3, 0, 2}));

    // all_gather_v: rank r sends r + 1 rows.
    auto parts = client::torch::AllGatherV(
        **group, at::full({i + 1, 2}, double(i), at::kDouble));
    ASSERT_TRUE(parts.ok()) << parts.status();
    ASSERT_EQ(parts->size(), 3u);
    for (int r = 0; r < 3; ++r) {
      EXPECT_TRUE(
          at::equal((*parts)[r], at::full({r + 1, 2}, double(r), at::kDouble)));
    }

    // broadcast from rank 1, in place, as torch.distributed.broadcast.
    at::Tensor mine = at::full({4, 3}, float(i), at::kHalf);
    ASSERT_TRUE(client::torch::Broadcast(**group, mine, 1).ok());
    EXPECT_TRUE(at::equal(mine, at::full({4, 3}, 1.0, at::kHalf)));

    // A non-contiguous input is refused locally with a clear error.
    auto strided = client::torch::AllGather(**group, all[i].t());
    EXPECT_EQ(strided.status().code(), absl::StatusCode::kInvalidArgument);
  });
}

}  // namespace
}  // namespace fedgather::testing

namespace fedgather::testing {
namespace {

// Rank r's inputs for the all_reduce test: every dtype, a multi-chunk
// tensor and an empty one. Seeds torch's shared generator: call it from one
// thread.
std::map<std::string, at::Tensor> ReduceInputs(int rank, bool floating_only) {
  at::manual_seed(1000 + rank);
  std::map<std::string, at::Tensor> in = {
      {"f32", at::randn({5, 7}, at::kFloat)},
      {"big", at::randn({700000}, at::kFloat)},  // about 2.7 MiB: 3 chunks
      {"f64", at::randn({9}, at::kDouble)},
      {"f16", at::randn({4, 4}, at::kFloat).to(at::kHalf)},
      {"bf16", at::randn({33}, at::kFloat).to(at::kBFloat16)},
      {"empty", at::empty({0, 3}, at::kFloat)}};
  if (!floating_only) {
    in["i64"] = at::randint(-1000000, 1000000, {6}, at::kLong);
    in["i32"] = at::randint(-1000, 1000, {2, 3}, at::kInt);
  }
  return in;
}

// The reference: torch's own reduction in fp64, cast back to the dtype.
at::Tensor Reference(const std::vector<at::Tensor>& parts, v1::ReduceOp op,
                     const std::vector<double>& weights) {
  const at::ScalarType dtype = parts[0].scalar_type();
  const bool floating = at::isFloatingType(dtype);
  at::Tensor stacked = at::stack(parts).to(floating ? at::kDouble : at::kLong);
  at::Tensor out;
  switch (op) {
    case v1::SUM:
      out = stacked.sum(0);
      break;
    case v1::MEAN:
      out = stacked.mean(0);
      break;
    case v1::MIN:
      out = std::get<0>(stacked.min(0));
      break;
    case v1::MAX:
      out = std::get<0>(stacked.max(0));
      break;
    case v1::WEIGHTED_MEAN: {
      at::Tensor w = at::tensor(weights, at::kDouble);
      std::vector<int64_t> shape(stacked.dim(), 1);
      shape[0] = static_cast<int64_t>(weights.size());
      out = (stacked * w.reshape(shape)).sum(0) / w.sum();
      break;
    }
    default:
      break;
  }
  return out.to(dtype);
}

void ExpectMatches(const at::Tensor& got, const at::Tensor& want,
                   const std::string& what) {
  ASSERT_EQ(got.scalar_type(), want.scalar_type()) << what;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  double rtol = 0, atol = 0;  // integers: exact
  switch (got.scalar_type()) {
    case at::kFloat:
      rtol = 1e-5, atol = 1e-5;  // fp32 accumulation vs fp64
      break;
    case at::kDouble:
      rtol = 1e-12, atol = 1e-12;
      break;
    case at::kHalf:
      rtol = 2e-3, atol = 2e-3;  // one half ulp of the result
      break;
    case at::kBFloat16:
      rtol = 1.6e-2, atol = 1.6e-2;  // one bfloat16 ulp
      break;
    default:
      break;
  }
  if (rtol == 0) {
    EXPECT_TRUE(at::equal(got, want)) << what;
  } else {
    EXPECT_TRUE(
        at::allclose(got.to(at::kDouble), want.to(at::kDouble), rtol, atol))
        << what << ": max difference "
        << (got.to(at::kDouble) - want.to(at::kDouble))
               .abs()
               .max()
               .item<double>();
  }
}

class AllReduceTorchTest : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(WorldSizes, AllReduceTorchTest,
                         ::testing::Values(2, 3, 4));

TEST_P(AllReduceTorchTest, EveryOpAndDtypeMatchesTorchsReduction) {
  const int world = GetParam();
  ClusterOptions options(world);
  // A small round buffer: the reduction must hold back fast uploaders.
  options.limits.max_buffered_bytes_per_round = 2 << 20;
  TestCluster cluster(options);
  std::vector<double> weights;
  for (int r = 0; r < world; ++r) weights.push_back(r + 1.5);
  // Made here, on one thread: torch's default generator is shared.
  std::vector<std::map<std::string, at::Tensor>> all_inputs[2];
  for (int floating_only = 0; floating_only < 2; ++floating_only) {
    for (int r = 0; r < world; ++r) {
      all_inputs[floating_only].push_back(ReduceInputs(r, floating_only));
    }
  }
  RunRanks(world, [&](int i) {
    std::unique_ptr<Client> client = cluster.Connect(TestCluster::Site(i));
    auto group = client->Join({"demo", world, i, absl::Seconds(30)});
    ASSERT_TRUE(group.ok()) << group.status();
    // Integer means and BOOL tensors are refused locally, spending no seq
    // (first, while every member is still in the group).
    auto refused =
        client::torch::AllReduce(**group, at::ones({2}, at::kLong), v1::MEAN);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(refused.status().message()),
                ::testing::HasSubstr("MEAN needs floating tensors"));
    auto boolean =
        client::torch::AllReduce(**group, at::ones({2}, at::kBool), v1::MAX);
    EXPECT_EQ(boolean.status().code(), absl::StatusCode::kInvalidArgument);
    for (v1::ReduceOp op :
         {v1::SUM, v1::MEAN, v1::MIN, v1::MAX, v1::WEIGHTED_MEAN}) {
      const bool floating_only = op == v1::MEAN || op == v1::WEIGHTED_MEAN;
      const std::vector<std::map<std::string, at::Tensor>>& all =
          all_inputs[floating_only];
      auto got = client::torch::AllReduce(**group, all[i], op, weights[i]);
      ASSERT_TRUE(got.ok()) << v1::ReduceOp_Name(op) << ": " << got.status();
      ASSERT_EQ(got->size(), all[0].size());
      for (const auto& [name, tensor] : all[0]) {
        std::vector<at::Tensor> parts;
        for (int r = 0; r < world; ++r) parts.push_back(all[r].at(name));
        ExpectMatches(
            got->at(name), Reference(parts, op, weights),
            absl::StrCat("rank ", i, " ", v1::ReduceOp_Name(op), " ", name));
      }
    }
  });
}

}  // namespace
}  // namespace fedgather::testing

namespace fedgather::testing {
namespace {

TEST(GroupAsyncTest, OutstandingCollectivesCompleteInSeqOrder) {
  constexpr int kWorld = 3;
  TestCluster cluster{ClusterOptions(kWorld)};
  RunRanks(kWorld, [&](int i) {
    std::unique_ptr<Client> client = cluster.Connect(TestCluster::Site(i));
    auto group = client->Join({"demo", kWorld, i, absl::Seconds(30)});
    ASSERT_TRUE(group.ok()) << group.status();
    auto part = [](int rank, int step) {
      return at::arange(6, at::kInt).reshape({2, 3}) * 100 + rank * 10 + step;
    };
    // Five collectives of different ops outstanding at once.
    std::vector<Work<at::Tensor>> gathers;
    for (int step = 0; step < 3; ++step) {
      gathers.push_back(client::torch::AllGatherAsync(**group, part(i, step)));
    }
    Work<at::Tensor> sum = client::torch::AllReduceAsync(
        **group, at::full({4}, int64_t{i + 1}, at::kLong), v1::SUM);
    at::Tensor mine = at::full({3}, double(i), at::kDouble);
    Work<> broadcast = client::torch::BroadcastAsync(**group, mine, 2);
    Work<std::vector<std::string>> names =
        (*group)->AllGatherBytesAsync(TestCluster::Site(i));

    // The last one done means every earlier one is done: they run in order.
    auto gathered_names = names.Get();
    ASSERT_TRUE(gathered_names.ok()) << gathered_names.status();
    for (const Work<at::Tensor>& work : gathers)
      EXPECT_TRUE(work.IsCompleted());
    EXPECT_TRUE(sum.IsCompleted());
    EXPECT_TRUE(broadcast.IsCompleted());
    EXPECT_THAT(*gathered_names,
                ::testing::ElementsAre("site-1", "site-2", "site-3"));
    for (int step = 0; step < 3; ++step) {
      auto got = gathers[step].Get();
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_TRUE(at::equal(
          *got, at::stack({part(0, step), part(1, step), part(2, step)})))
          << "step " << step;
    }
    auto summed = sum.Get();
    ASSERT_TRUE(summed.ok()) << summed.status();
    EXPECT_TRUE(at::equal(*summed, at::full({4}, int64_t{6}, at::kLong)));
    ASSERT_TRUE(broadcast.Wait().ok());
    EXPECT_TRUE(at::equal(mine, at::full({3}, 2.0, at::kDouble)));
  });
}

TEST(GroupAsyncTest, WaitTimesOutWithoutCancellingTheCollective) {
  TestCluster cluster(ClusterOptions(2));
  absl::Notification rank0_waited;
  RunRanks(2, [&](int i) {
    std::unique_ptr<Client> client = cluster.Connect(TestCluster::Site(i));
    auto group = client->Join({"demo", 2, i, absl::Seconds(30)});
    ASSERT_TRUE(group.ok()) << group.status();
    const at::Tensor input = at::full({5}, float(i), at::kFloat);
    if (i == 1) {
      // Rank 1 starts only once rank 0 has seen its Wait time out.
      ASSERT_TRUE(
          rank0_waited.WaitForNotificationWithTimeout(absl::Seconds(30)));
      auto got = client::torch::AllGather(**group, input);
      ASSERT_TRUE(got.ok()) << got.status();
      return;
    }
    Work<at::Tensor> work = client::torch::AllGatherAsync(**group, input);
    const absl::Status early = work.Wait(absl::Milliseconds(50));
    EXPECT_EQ(early.code(), absl::StatusCode::kDeadlineExceeded) << early;
    EXPECT_FALSE(work.IsCompleted());
    rank0_waited.Notify();
    auto got = work.Get();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(work.IsCompleted());
    EXPECT_TRUE(
        at::equal(*got, at::stack({at::full({5}, 0.0f), at::full({5}, 1.0f)})));
  });
}

TEST(GroupAsyncTest, LeavingRefusesTheCollectivesStillQueued) {
  TestCluster cluster(ClusterOptions(2));
  absl::Notification rank1_joined, rank0_left;
  RunRanks(2, [&](int i) {
    std::unique_ptr<Client> client = cluster.Connect(TestCluster::Site(i));
    auto group = client->Join({"demo", 2, i, absl::Seconds(30)});
    ASSERT_TRUE(group.ok()) << group.status();
    if (i == 1) {
      // Rank 1 never contributes; it sees the epoch end when rank 0 leaves.
      // Rank 0 leaves only once rank 1 holds its Joined: a leave before that
      // fails rank 1's join instead (UNAVAILABLE naming rank 0), which is
      // not what this case is about.
      rank1_joined.Notify();
      ASSERT_TRUE(rank0_left.WaitForNotificationWithTimeout(absl::Seconds(30)));
      auto after = client::torch::AllGather(**group, at::ones({1}));
      EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable)
          << after.status();
      return;
    }
    Work<at::Tensor> running =
        client::torch::AllGatherAsync(**group, at::ones({1}));
    Work<at::Tensor> queued =
        client::torch::AllGatherAsync(**group, at::ones({1}));
    ASSERT_TRUE(rank1_joined.WaitForNotificationWithTimeout(absl::Seconds(30)));
    group->reset();  // leaves the group
    rank0_left.Notify();
    EXPECT_FALSE(running.Wait().ok());
    const absl::Status refused = queued.Wait();
    EXPECT_EQ(refused.code(), absl::StatusCode::kCancelled) << refused;
    EXPECT_THAT(std::string(refused.message()),
                ::testing::HasSubstr("left the group before the collective"));
  });
}

}  // namespace
}  // namespace fedgather::testing
