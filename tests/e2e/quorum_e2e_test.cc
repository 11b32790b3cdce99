// Quorum rounds end to end over real mutual TLS on 127.0.0.1:0, one thread
// per rank: a group with min_quorum and round_deadline commits with the
// ranks that started by the deadline (all_gather and weighted all_reduce),
// a rank that comes later gets FAILED_PRECONDITION and carries on with the
// next seq, and a round below quorum fails with DEADLINE_EXCEEDED naming
// the missing ranks on every rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/client.h"
#include "tests/e2e/test_cluster.h"

namespace fedgather::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ClusterOptions QuorumCluster(int world, int min_quorum,
                             const std::string& deadline) {
  ClusterOptions options(world);
  options.group_extra = absl::StrCat("    min_quorum: ", min_quorum,
                                     "\n    round_deadline: ", deadline, "\n");
  return options;
}

// Rank r's contribution: 5 floats r * 10 + i.
std::vector<float> ValuesOf(int rank) {
  std::vector<float> v(5);
  for (int i = 0; i < 5; ++i) v[i] = static_cast<float>(rank * 10 + i) + 0.25f;
  return v;
}

TEST(QuorumTest, RoundCommitsWithoutAStragglerWhoThenGetsFailedPrecondition) {
  TestCluster cluster(QuorumCluster(4, 3, "1s"));
  Members members(cluster);
  absl::Notification others_done;
  std::vector<absl::Status> status(4);
  std::vector<std::vector<int>> contributors(4);
  std::vector<std::vector<float>> gathered(4, std::vector<float>(20));
  RunRanks(4, [&](int r) {
    const std::vector<float> mine = ValuesOf(r);
    const ConstHostTensor in{{"x", DType::kF32, {5}}, mine.data()};
    // Poison the output: the straggler's row must come back as zeros.
    std::memset(gathered[r].data(), 0xff, gathered[r].size() * sizeof(float));
    const MutableHostTensor out{{"x", DType::kF32, {4, 5}}, gathered[r].data()};
    CollectiveOptions options;
    options.contributors = &contributors[r];
    if (r == 3) {  // the straggler: still training when the round closes
      ASSERT_TRUE(
          others_done.WaitForNotificationWithTimeout(absl::Seconds(60)));
    }
    status[r] = members.groups[r]->AllGatherInto({&in, 1}, {&out, 1}, options);
    if (r == 0) others_done.Notify();
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    EXPECT_THAT(contributors[r], ElementsAre(0, 1, 2));
    for (int src = 0; src < 3; ++src) {
      const std::vector<float> want = ValuesOf(src);
      EXPECT_EQ(std::memcmp(gathered[r].data() + src * 5, want.data(),
                            5 * sizeof(float)),
                0)
          << "rank " << r << " row " << src;
    }
    for (int i = 15; i < 20; ++i) EXPECT_EQ(gathered[r][i], 0.0f);
  }
  EXPECT_EQ(status[3].code(), absl::StatusCode::kFailedPrecondition)
      << status[3];
  EXPECT_THAT(std::string(status[3].message()),
              HasSubstr("seq 0 has already completed without rank 3"));
  // The straggler is still a member: the next round takes all four.
  members.ExpectNextRoundWorks();
}

TEST(QuorumTest, WeightedMeanUsesOnlyTheContributors) {
  TestCluster cluster(QuorumCluster(4, 2, "1s"));
  Members members(cluster);
  absl::Notification closed;
  std::vector<absl::Status> status(4);
  std::vector<std::vector<int>> contributors(4);
  std::vector<std::vector<float>> result(4, std::vector<float>(5));
  const double weights[] = {10, 30, 60, 1000};
  RunRanks(4, [&](int r) {
    const std::vector<float> mine = ValuesOf(r);
    const ConstHostTensor in{{"w", DType::kF32, {5}}, mine.data()};
    const MutableHostTensor out{{"w", DType::kF32, {5}}, result[r].data()};
    CollectiveOptions options;
    options.contributors = &contributors[r];
    if (r == 3) {  // a heavy site that misses the deadline
      ASSERT_TRUE(closed.WaitForNotificationWithTimeout(absl::Seconds(60)));
      status[r] = members.groups[r]->AllReduce(absl::MakeConstSpan(&in, 1),
                                               absl::MakeConstSpan(&out, 1),
                                               v1::WEIGHTED_MEAN, weights[r]);
      return;
    }
    status[r] = members.groups[r]->AllReduce(
        {&in, 1}, {&out, 1}, v1::WEIGHTED_MEAN, weights[r], options);
    if (r == 0) closed.Notify();
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    EXPECT_THAT(contributors[r], ElementsAre(0, 1, 2));
    for (int i = 0; i < 5; ++i) {
      double sum = 0;
      for (int src = 0; src < 3; ++src) sum += weights[src] * ValuesOf(src)[i];
      const double want = sum / (weights[0] + weights[1] + weights[2]);
      EXPECT_NEAR(result[r][i], want, 1e-5 * std::abs(want))
          << "rank " << r << " element " << i;
    }
  }
  EXPECT_EQ(status[3].code(), absl::StatusCode::kFailedPrecondition)
      << status[3];
  members.ExpectNextRoundWorks();
}

TEST(QuorumTest, BelowQuorumFailsEveryRankNamingTheMissing) {
  TestCluster cluster(QuorumCluster(3, 2, "300ms"));
  Members members(cluster);
  absl::Notification failed;
  std::vector<absl::Status> status(3);
  RunRanks(3, [&](int r) {
    if (r > 0) {  // both come only after the round has failed
      ASSERT_TRUE(failed.WaitForNotificationWithTimeout(absl::Seconds(60)));
    }
    status[r] = GatherRanks(*members.groups[r]);
    if (r == 0) failed.Notify();
  });
  ExpectSameStatusEverywhere(status, absl::StatusCode::kDeadlineExceeded);
  const std::string message(status[0].message());
  EXPECT_THAT(message, HasSubstr("with 1 of 3 ranks started (min_quorum 2)"));
  EXPECT_THAT(message,
              HasSubstr("rank 1 (spiffe://fedgather/site-2): not started"));
  EXPECT_THAT(message,
              HasSubstr("rank 2 (spiffe://fedgather/site-3): not started"));
  members.ExpectNextRoundWorks();
}

TEST(QuorumTest, BroadcastWithoutItsRootFailsAtTheDeadline) {
  TestCluster cluster(QuorumCluster(3, 2, "300ms"));
  Members members(cluster);
  absl::Notification failed;
  std::vector<absl::Status> status(3);
  RunRanks(3, [&](int r) {
    if (r == 2) {  // the root comes after the round has failed
      ASSERT_TRUE(failed.WaitForNotificationWithTimeout(absl::Seconds(60)));
    }
    std::vector<int32_t> data(4, r);
    const MutableHostTensor t{{"t", DType::kI32, {4}}, data.data()};
    status[r] = members.groups[r]->Broadcast({&t, 1}, 2);
    if (r == 0) failed.Notify();
  });
  ExpectSameStatusEverywhere(status, absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(status[0].message()),
              HasSubstr("but not the broadcast's root rank 2"));
  members.ExpectNextRoundWorks();
}

}  // namespace
}  // namespace fedgather::testing
