// What only the ring all_reduce does (the rest: all_reduce_algorithms_
// test.cc), over real mutual-TLS peer links on 127.0.0.1: a tampering
// forwarder makes the ranks' results differ.
#include "client/peer/ring_all_reduce.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/client/peer/collective_test_data.h"
#include "tests/client/peer/peer_test_pki.h"

namespace fedgather {
namespace {

using testing::Contribution;
using testing::MakeRing;
using testing::PeerTestPki;
using testing::RankOutcome;
using testing::RingReduceOver;
using testing::RunReduce;
using testing::TestRing;

TEST(RingAllReduce, AForwarderThatChangesBytesMakesTheRanksResultsDiffer) {
  PeerTestPki pki;
  constexpr int kWorld = 3;
  TestRing ring = MakeRing(pki, kWorld);
  const Fingerprint tensors = {{"w", DType::kF32, {30000}}};
  std::vector<std::string> contributions;
  for (int r = 0; r < kWorld; ++r) {
    contributions.push_back(Contribution(tensors, r, 5));
  }
  std::vector<RingOptions> options(kWorld);
  // Rank 1 flips a bit of everything it forwards: in the reduce-scatter a
  // partial sum (every rank then agrees on a wrong segment), in the
  // all_gather a reduced segment, which only the ranks after it receive.
  options[1].forward_hook = [](int, char* data, size_t) { data[0] ^= 1; };
  const RankOutcome outcome =
      RunReduce(RingReduceOver(ring), tensors, v1::SUM,
                std::vector<double>(kWorld, 1.0), contributions, options);
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(outcome.status[r].ok()) << outcome.status[r];
  }
  EXPECT_FALSE(outcome.out[0] == outcome.out[1] &&
               outcome.out[1] == outcome.out[2]);
}

}  // namespace
}  // namespace fedgather
