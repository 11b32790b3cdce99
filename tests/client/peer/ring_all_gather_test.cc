// The ring all_gather over real mutual-TLS peer links on 127.0.0.1:
// byte-exact results for every world size and uneven parts, and what a
// broken, stalled or tampering member does to the others.
#include "client/peer/ring_all_gather.h"

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/peer/peer_test_pki.h"

namespace fedgather {
namespace {

using ::testing::HasSubstr;
using testing::MakeRing;
using testing::PeerTestPki;
using testing::TestRing;

std::string Part(int rank, size_t size, uint32_t seed) {
  std::mt19937 random(seed * 1000 + rank);
  std::string part(size, '\0');
  for (char& c : part) c = static_cast<char>(random());
  return part;
}

// What one all_gather gave each rank.
struct Outcome {
  std::vector<absl::Status> status;
  std::vector<std::string> out;
};

// RunRanks runs one all_gather of `sizes` (parts of Part(r, size, seed)) on
// every rank but `absent`, rank r with options[r].
Outcome RunRanks(TestRing& ring, const std::vector<size_t>& sizes,
                 const std::vector<RingOptions>& options, uint32_t seed,
                 int absent = -1) {
  const int world = static_cast<int>(sizes.size());
  size_t total = 0;
  for (size_t s : sizes) total += s;
  Outcome outcome{std::vector<absl::Status>(world),
                  std::vector<std::string>(world, std::string(total, '?'))};
  std::vector<std::string> parts;
  for (int r = 0; r < world; ++r) parts.push_back(Part(r, sizes[r], seed));
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    if (r == absent) continue;
    ranks.emplace_back([&, r] {
      outcome.status[r] = RingAllGather(
          r, sizes, parts[r].data(), outcome.out[r].data(),
          ring.to_next[r].get(), ring.from_prev[r].get(), options[r]);
    });
  }
  for (std::thread& t : ranks) t.join();
  return outcome;
}

// Gather runs it on every rank with the same options.
Outcome Gather(TestRing& ring, const std::vector<size_t>& sizes,
               const RingOptions& options, uint32_t seed) {
  return RunRanks(ring, sizes, std::vector<RingOptions>(sizes.size(), options),
                  seed);
}

std::string Expected(const std::vector<size_t>& sizes, uint32_t seed) {
  std::string all;
  for (int r = 0; r < static_cast<int>(sizes.size()); ++r) {
    all += Part(r, sizes[r], seed);
  }
  return all;
}

TEST(RingAllGather, EveryRankGetsEveryPartByteForByte) {
  PeerTestPki pki;
  for (int world : {1, 2, 3, 4, 8}) {
    SCOPED_TRACE(absl::StrCat("N = ", world));
    TestRing ring = MakeRing(pki, world);
    RingOptions options;
    options.chunk_bytes = 4096;  // many chunks per part
    // Several ops on the same links: equal, uneven with empty parts, tiny.
    const std::vector<std::vector<size_t>> cases = {
        std::vector<size_t>(world, 40000),
        [&] {
          std::vector<size_t> sizes;
          for (int r = 0; r < world; ++r)
            sizes.push_back(r % 3 == 1 ? 0 : 4096 * r + 17);
          return sizes;
        }(),
        std::vector<size_t>(world, 1)};
    for (size_t c = 0; c < cases.size(); ++c) {
      options.op = c + 1;
      Outcome outcome = Gather(ring, cases[c], options, 7 + c);
      const std::string expected = Expected(cases[c], 7 + c);
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(outcome.status[r].ok()) << outcome.status[r];
        EXPECT_TRUE(outcome.out[r] == expected)
            << "rank " << r << ", case " << c;
      }
    }
  }
}

TEST(RingAllGather, InPlaceAndLargePartsWithTheDefaultChunks) {
  PeerTestPki pki;
  TestRing ring = MakeRing(pki, 3);
  const std::vector<size_t> sizes = {3 << 20, (3 << 20) + 5, 1 << 20};
  const std::string expected = Expected(sizes, 3);
  std::vector<std::string> out(3, std::string(expected.size(), '?'));
  std::vector<absl::Status> status(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      // Each rank's part is already in its place in `out`.
      size_t offset = 0;
      for (int p = 0; p < r; ++p) offset += sizes[p];
      const std::string mine = Part(r, sizes[r], 3);
      std::copy(mine.begin(), mine.end(), out[r].begin() + offset);
      status[r] =
          RingAllGather(r, sizes, out[r].data() + offset, out[r].data(),
                        ring.to_next[r].get(), ring.from_prev[r].get(), {});
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    EXPECT_TRUE(out[r] == expected) << "rank " << r;
  }
}

TEST(RingAllGather, AForwardedChangeReachesOnlyTheRanksDownstream) {
  // The ring alone cannot tell a changed part (the commit's digests do,
  // in the data plane); this shows which ranks a tampering forwarder
  // reaches, the property the digests must cover.
  PeerTestPki pki;
  TestRing ring = MakeRing(pki, 4);
  const std::vector<size_t> sizes(4, 10000);
  std::vector<RingOptions> options(4);
  options[1].forward_hook = [](int part, char* data, size_t size) {
    if (part == 0) data[0] ^= 1;
  };
  Outcome outcome = RunRanks(ring, sizes, options, 5);
  const std::string expected = Expected(sizes, 5);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(outcome.status[r].ok()) << outcome.status[r];
  }
  EXPECT_TRUE(outcome.out[0] == expected);
  EXPECT_TRUE(outcome.out[1] == expected);
  // Ranks 2 and 3 got part 0 with its first byte changed, nothing else.
  for (int r : {2, 3}) {
    EXPECT_EQ(outcome.out[r][0], static_cast<char>(expected[0] ^ 1));
    EXPECT_EQ(outcome.out[r].substr(1), expected.substr(1));
  }
}

TEST(RingAllGather, AMemberThatStopsFailsEveryOtherRankWithinTheStallTimeout) {
  PeerTestPki pki;
  TestRing ring = MakeRing(pki, 4);
  RingOptions options;
  options.stall_timeout = absl::Milliseconds(500);
  const absl::Time start = absl::Now();
  // Rank 2 never takes part.
  Outcome outcome = RunRanks(ring, std::vector<size_t>(4, 1 << 20),
                             std::vector<RingOptions>(4, options), 1,
                             /*absent=*/2);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (int r : {0, 1, 3}) {
    EXPECT_FALSE(outcome.status[r].ok()) << "rank " << r;
  }
  // Rank 3 waits on its link from rank 2 and names it.
  EXPECT_EQ(outcome.status[3].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(outcome.status[3].message(), HasSubstr("rank 2 ('site-2')"));
}

TEST(RingAllGather, AClosedLinkFailsTheRanksAtOnce) {
  PeerTestPki pki;
  TestRing ring = MakeRing(pki, 3);
  ring.to_next[0]->Abort();  // rank 0's link to rank 1 breaks
  RingOptions options;
  options.stall_timeout = absl::Seconds(20);
  const absl::Time start = absl::Now();
  Outcome outcome = Gather(ring, std::vector<size_t>(3, 100000), options, 2);
  // Rank 1 hears of the break through its link; ranks 0 and 2 fail from it.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(outcome.status[0].code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(outcome.status[1].code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(outcome.status[1].message(), HasSubstr("rank 0 ('site-0')"));
  EXPECT_EQ(outcome.status[2].code(), absl::StatusCode::kUnavailable);
}

TEST(RingAllGather, AChunkOfAnotherOpIsDataLoss) {
  PeerTestPki pki;
  TestRing ring = MakeRing(pki, 2);
  std::vector<RingOptions> options(2);
  options[0].op = 1;
  options[1].op = 2;
  Outcome outcome = RunRanks(ring, std::vector<size_t>(2, 10), options, 4);
  // Each rank sees the other's chunk, unless the other, failing first,
  // broke the links before it read it.
  int data_loss = 0;
  for (int r = 0; r < 2; ++r) {
    const absl::Status& status = outcome.status[r];
    if (status.code() == absl::StatusCode::kDataLoss) {
      ++data_loss;
      EXPECT_THAT(status.message(),
                  HasSubstr(r == 0 ? "a chunk of op 2, part 1, 10 bytes came "
                                     "where op 1, part 1, 10 bytes"
                                   : "a chunk of op 1, part 0, 10 bytes came "
                                     "where op 2, part 0, 10 bytes"));
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    }
  }
  EXPECT_GE(data_loss, 1);
}

}  // namespace
}  // namespace fedgather
