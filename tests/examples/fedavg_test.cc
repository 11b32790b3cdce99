// The federated digits example: its averaging helpers against hand-computed
// values, and a short FedAvg run of four sites over real mutual TLS on
// 127.0.0.1:0 (TestCluster), checking every rank's result.
#include "examples/fedavg_digits/fedavg.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>

#include "tests/e2e/test_cluster.h"

namespace fedgather::fedavg {
namespace {

using ::fedgather::testing::Members;
using ::fedgather::testing::TestCluster;

TEST(WeightedMeanTest, AveragesOverRanksInDoublePrecision) {
  std::map<std::string, at::Tensor> gathered = {
      {"w", at::tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}).reshape({3, 2})},
      {"b", at::tensor({1.0, 10.0, 100.0}, at::kDouble).reshape({3, 1, 1})}};
  absl::StatusOr<std::map<std::string, at::Tensor>> mean =
      WeightedMean(gathered, {1, 2, 3});
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_EQ(mean->at("w").scalar_type(), at::kDouble);
  EXPECT_EQ(mean->at("w").sizes(), (at::IntArrayRef{2}));
  EXPECT_DOUBLE_EQ(mean->at("w")[0].item<double>(), (1 + 2 * 3 + 3 * 5) / 6.0);
  EXPECT_DOUBLE_EQ(mean->at("w")[1].item<double>(), (2 + 2 * 4 + 3 * 6) / 6.0);
  EXPECT_EQ(mean->at("b").sizes(), (at::IntArrayRef{1, 1}));
  EXPECT_DOUBLE_EQ(mean->at("b").item<double>(), (1 + 20 + 300) / 6.0);

  EXPECT_EQ(WeightedMean(gathered, {1, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WeightedMean(gathered, {1, 0, 3}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WeightedMean({{"i", at::zeros({3, 2}, at::kLong)}}, {1, 1, 1})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MaxAbsDiffTest, ComparesNameByName) {
  const at::Tensor a = at::tensor({1.0f, 2.0f, 3.0f});
  absl::StatusOr<double> d =
      MaxAbsDiff({{"x", a}, {"e", at::empty({0})}},
                 {{"x", at::tensor({1.0, 2.5, 2.75}, at::kDouble)},
                  {"e", at::empty({0})}});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_DOUBLE_EQ(*d, 0.5);
  EXPECT_EQ(MaxAbsDiff({{"x", a}}, {{"y", a}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MaxAbsDiff({{"x", a}}, {{"x", a.reshape({3, 1})}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ParseAggregationTest, NamesRoundTrip) {
  for (Aggregation a :
       {Aggregation::kAllReduce, Aggregation::kAllGather, Aggregation::kBoth}) {
    absl::StatusOr<Aggregation> parsed = ParseAggregation(AggregationName(a));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, a);
  }
  EXPECT_FALSE(ParseAggregation("mean").ok());
}

class FedAvgDigitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<Dataset> all = LoadDigits(FEDAVG_DIGITS_CSV);
    ASSERT_TRUE(all.ok()) << all.status();
    absl::StatusOr<Split> split = SplitNonIid(*all, SplitOptions{});
    ASSERT_TRUE(split.ok()) << split.status();
    split_ = *std::move(split);
  }

  Split split_;
};

// Five rounds of FedAvg, averaging both on the server (all_reduce) and
// locally (all_gather), which RunFederation checks against each other every
// round. The global model must beat the initial one and every site trained
// alone, and every rank must see the same model.
TEST_F(FedAvgDigitsTest, ShortRunOverMutualTlsLearns) {
  constexpr int kRounds = 5;
  constexpr double kFloor = 0.75;  // measured 0.841 (examples/fedavg_digits)
  TestCluster cluster(4);
  Members members(cluster);
  FederationOptions options;
  options.rounds = kRounds;
  options.aggregation = Aggregation::kBoth;
  options.collective.timeout = absl::Seconds(60);
  std::vector<absl::StatusOr<FederationResult>> results(
      4, absl::UnknownError("not run"));
  for (const absl::Status& s : members.Run([&](int i) {
         results[i] = RunFederation(*members.groups[i], split_.sites[i],
                                    split_.test, options);
         return results[i].status();
       })) {
    ASSERT_TRUE(s.ok()) << s;
  }

  const FederationResult& first = *results[0];
  ASSERT_EQ(first.rounds.size(), static_cast<size_t>(kRounds));
  for (int r = 0; r < kRounds; ++r) {
    std::cout << "round " << r + 1 << ": test accuracy "
              << first.rounds[r].test_accuracy << ", max |ar - ag| "
              << first.rounds[r].max_abs_diff << std::endl;
  }
  std::cout << "initial " << first.initial_accuracy << ", local-only";
  for (double a : first.local_only_accuracy) std::cout << " " << a;
  std::cout << std::endl;

  for (int i = 0; i < 4; ++i) {
    const FederationResult& result = *results[i];
    ASSERT_EQ(result.rounds.size(), static_cast<size_t>(kRounds));
    ASSERT_EQ(result.example_counts.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(result.example_counts[r], split_.sites[r].size());
    }
    EXPECT_EQ(result.initial_accuracy, first.initial_accuracy) << "rank " << i;
    EXPECT_EQ(result.local_only_accuracy, first.local_only_accuracy);
    for (int r = 0; r < kRounds; ++r) {
      // One global model: every rank evaluates exactly the same accuracy.
      EXPECT_EQ(result.rounds[r].test_accuracy, first.rounds[r].test_accuracy)
          << "rank " << i << " round " << r + 1;
      EXPECT_GE(result.rounds[r].max_abs_diff, 0);
      EXPECT_LE(result.rounds[r].max_abs_diff, kAggregationTolerance);
    }
  }
  ASSERT_EQ(first.local_only_accuracy.size(), 4u);
  const double best_alone = *std::max_element(first.local_only_accuracy.begin(),
                                              first.local_only_accuracy.end());
  EXPECT_GE(first.final_accuracy, kFloor);
  EXPECT_GT(first.final_accuracy, first.initial_accuracy + 0.5);
  EXPECT_GT(first.final_accuracy, best_alone + 0.2);
  EXPECT_GT(first.final_accuracy, first.rounds[0].test_accuracy);
}

// Sites that disagree on the configuration fail before training, on every
// rank, naming what differs.
TEST_F(FedAvgDigitsTest, MismatchedConfigurationFailsEverywhere) {
  TestCluster cluster(2);
  Members members(cluster);
  std::vector<absl::Status> statuses = members.Run([&](int i) {
    FederationOptions options;
    options.rounds = 1;
    options.train.learning_rate = i == 0 ? 0.1 : 0.2;
    return RunFederation(*members.groups[i], split_.sites[i], split_.test,
                         options)
        .status();
  });
  for (const absl::Status& s : statuses) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("lr=0.2"), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace fedgather::fedavg
