// What only the log-step all_reduce does (the rest: all_reduce_algorithms_
// test.cc), over real mutual-TLS peer links on 127.0.0.1: every rank gets
// every contribution whole, byte for byte, to check against its claim.
#include "client/peer/gather_all_reduce.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/client/peer/collective_test_data.h"
#include "tests/client/peer/peer_test_pki.h"

namespace fedgather {
namespace {

using testing::Contribution;
using testing::MakeRing;
using testing::PeerTestPki;
using testing::TestRing;

TEST(GatherAllReduce, EveryRankGetsEveryContributionWhole) {
  PeerTestPki pki;
  constexpr int kWorld = 5;
  TestRing ring = MakeRing(pki, kWorld);
  const Fingerprint tensors = {{"w", DType::kF32, {700}},
                               {"n", DType::kI64, {9}}};
  std::vector<std::string> contributions;
  std::string all;
  for (int r = 0; r < kWorld; ++r) {
    contributions.push_back(Contribution(tensors, r, 8));
    all += contributions.back();
  }
  const size_t size = contributions[0].size();
  std::vector<absl::Status> status(kWorld);
  std::vector<std::string> gathered(kWorld, std::string(size * kWorld, '?'));
  std::vector<std::string> out(kWorld, std::string(size, '?'));
  std::vector<std::thread> ranks;
  for (int r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      RingOptions options;
      options.chunk_bytes = 500;  // contributions in several chunks
      std::vector<char> accumulators;
      status[r] = GatherAllReduce(
          r, tensors, v1::SUM, std::vector<double>(kWorld, 1.0),
          contributions[r].data(), gathered[r].data(), out[r].data(),
          ring.to_links(r), ring.from_links(r), options, &accumulators);
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    EXPECT_TRUE(gathered[r] == all) << "rank " << r;
    EXPECT_TRUE(out[r] == out[0]) << "rank " << r;
  }
}

}  // namespace
}  // namespace fedgather
