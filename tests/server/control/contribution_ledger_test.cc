#include "server/control/contribution_ledger.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace fedgather::server {
namespace {

using Closing = ContributionLedger::Closing;

const std::vector<std::string> kIdentities = {"a", "b", "c", "d"};

Digest DigestOf(uint8_t fill) {
  Digest digest;
  digest.fill(fill);
  return digest;
}

TEST(ContributionLedgerTest, TheLastEndOfEveryRankCompletesTheRoundOnce) {
  ContributionLedger ledger(3, /*min_quorum=*/0);
  for (int r = 0; r < 3; ++r) ledger.Start(r);
  EXPECT_FALSE(ledger.End(2, DigestOf(2), 20));
  EXPECT_FALSE(ledger.End(2, DigestOf(9), 99));  // a second End: ignored
  EXPECT_EQ(ledger.digest(2), DigestOf(2));
  EXPECT_EQ(ledger.bytes(2), 20);
  EXPECT_FALSE(ledger.End(0, DigestOf(0), 0));
  EXPECT_FALSE(ledger.AllEnded());
  EXPECT_FALSE(ledger.ended(1));
  EXPECT_TRUE(ledger.End(1, DigestOf(1), 10));
  EXPECT_TRUE(ledger.AllEnded());
  EXPECT_FALSE(ledger.End(1, DigestOf(1), 10));  // completes only once

  v1::Commit commit;
  ledger.AddContributions(kIdentities, &commit);
  ASSERT_EQ(commit.contributions_size(), 3);
  for (int r = 0; r < 3; ++r) {
    const v1::RankDigest& got = commit.contributions(r);
    EXPECT_EQ(got.rank(), static_cast<uint32_t>(r));
    EXPECT_EQ(got.identity(), kIdentities[r]);
    EXPECT_EQ(got.digest(), std::string(32, static_cast<char>(r)));
    EXPECT_EQ(got.bytes(), static_cast<uint64_t>(10 * r));
  }
}

TEST(ContributionLedgerTest, EveryRankStartedLeavesNothingToClose) {
  ContributionLedger ledger(2, /*min_quorum=*/1);
  ledger.Start(0);
  ledger.Start(1);
  EXPECT_EQ(ledger.CheckClose(std::nullopt), Closing::kNothingToClose);
  EXPECT_FALSE(ledger.closed());
  EXPECT_EQ(ledger.contributors(), 2);
}

TEST(ContributionLedgerTest, AQuorumNeedsMinQuorumRanksAndABroadcastsRoot) {
  ContributionLedger ledger(4, /*min_quorum=*/2);
  ledger.Start(3);
  EXPECT_EQ(ledger.CheckClose(std::nullopt), Closing::kBelowQuorum);
  ledger.Start(1);
  EXPECT_EQ(ledger.StartedCount(), 2);
  EXPECT_EQ(ledger.CheckClose(/*broadcast_root=*/0), Closing::kWithoutRoot);
  EXPECT_EQ(ledger.CheckClose(/*broadcast_root=*/3), Closing::kCloses);
  EXPECT_EQ(ledger.CheckClose(std::nullopt), Closing::kCloses);
  EXPECT_FALSE(ledger.closed());  // checking changes nothing
}

TEST(ContributionLedgerTest, ClosingShutsOutTheRanksThatHadNotStarted) {
  ContributionLedger ledger(4, /*min_quorum=*/2);
  ledger.Start(1);
  EXPECT_FALSE(ledger.End(1, DigestOf(1), 5));
  ledger.Start(3);
  EXPECT_EQ(ledger.Close(), (std::vector<bool>{false, true, false, true}));
  EXPECT_TRUE(ledger.closed());
  EXPECT_EQ(ledger.contributors(), 2);
  EXPECT_TRUE(ledger.shut_out(0));
  EXPECT_TRUE(ledger.shut_out(2));
  EXPECT_FALSE(ledger.started(0));
  ledger.Start(0);  // too late: a rank shut out stays out
  EXPECT_TRUE(ledger.shut_out(0));
  EXPECT_FALSE(ledger.started(0));
  EXPECT_FALSE(ledger.AllEnded());
  EXPECT_TRUE(ledger.End(3, DigestOf(3), 7));  // the last contributor

  v1::Commit commit;
  ledger.AddContributions(kIdentities, &commit);
  ASSERT_EQ(commit.contributions_size(), 2);
  EXPECT_EQ(commit.contributions(0).rank(), 1u);
  EXPECT_EQ(commit.contributions(0).bytes(), 5u);
  EXPECT_EQ(commit.contributions(1).rank(), 3u);
  EXPECT_EQ(commit.contributions(1).identity(), "d");
}

TEST(ContributionLedgerTest, ClosingAfterEveryStarterEndedCompletesTheRound) {
  ContributionLedger ledger(3, /*min_quorum=*/1);
  ledger.Start(2);
  EXPECT_FALSE(ledger.End(2, DigestOf(2), 1));  // the others may still come
  ledger.Close();
  EXPECT_TRUE(ledger.AllEnded());
}

}  // namespace
}  // namespace fedgather::server
