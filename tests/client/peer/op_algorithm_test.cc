// Which algorithm a direct round takes: log steps up to the protocol's
// thresholds (the largest part for the gathers and a broadcast, the
// contribution for an all_reduce), the ring above them.
#include "client/peer/op_algorithm.h"

#include <vector>

#include "gtest/gtest.h"

namespace fedgather {
namespace {

TEST(ChooseOpAlgorithm, TheLargestPartDecidesForTheGathersAndBroadcast) {
  for (v1::Op op : {v1::ALL_GATHER, v1::ALL_GATHER_V, v1::ALL_GATHER_BYTES,
                    v1::BROADCAST}) {
    EXPECT_EQ(ChooseOpAlgorithm(op, {0, kLogStepMaxPartBytes, 1}),
              OpAlgorithm::kLogSteps);
    EXPECT_EQ(ChooseOpAlgorithm(op, {0, kLogStepMaxPartBytes + 1, 1}),
              OpAlgorithm::kRing);
    EXPECT_EQ(ChooseOpAlgorithm(op, {0, 0, 0}), OpAlgorithm::kLogSteps);
  }
}

TEST(ChooseOpAlgorithm, AnAllReducesContributionHasItsOwnThreshold) {
  const std::vector<size_t> at(4, kLogStepMaxReduceBytes);
  const std::vector<size_t> over(4, kLogStepMaxReduceBytes + 1);
  EXPECT_EQ(ChooseOpAlgorithm(v1::ALL_REDUCE, at), OpAlgorithm::kLogSteps);
  EXPECT_EQ(ChooseOpAlgorithm(v1::ALL_REDUCE, over), OpAlgorithm::kRing);
}

}  // namespace
}  // namespace fedgather
