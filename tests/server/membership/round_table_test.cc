#include "server/membership/round_table.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/events/pending_callbacks.h"
#include "server/relay/round.h"

namespace fedgather::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::shared_ptr<Round> NewRound(uint64_t seq) {
  RoundOptions options;
  options.group = "g";
  options.epoch = 1;
  options.seq = seq;
  options.identities = {"a", "b"};
  return std::make_shared<Round>(std::move(options), nullptr);
}

v1::CollectiveHeader ResumeHeader(uint64_t epoch, uint64_t seq, uint32_t rank) {
  v1::CollectiveHeader header;
  header.set_epoch(epoch);
  header.set_seq(seq);
  header.set_rank(rank);
  header.set_resume(true);
  return header;
}

TEST(RoundTableTest, ARoundInFlightIsFoundUntilItFinishes) {
  RoundTable table;
  const std::shared_ptr<Round> round = NewRound(0);
  table.AddInFlight(0, round);
  EXPECT_EQ(table.InFlight(0), round);
  EXPECT_EQ(table.Resumable(0), round);
  EXPECT_EQ(table.InFlight(1), nullptr);
  EXPECT_EQ(table.InFlightCount(), 1);
  // A failed round is let go of at once: its journal is no longer needed.
  EXPECT_THAT(table.Finished(0, /*completed=*/false, /*keep_completed=*/true),
              ElementsAre(0u));
  EXPECT_EQ(table.InFlight(0), nullptr);
  EXPECT_EQ(table.Resumable(0), nullptr);
  EXPECT_THAT(table.Finished(0, false, true), IsEmpty());  // not there
}

TEST(RoundTableTest, CompletedRoundsStayResumableUpToTheCap) {
  RoundTable table;
  const int rounds = static_cast<int>(RoundTable::kKeptCompletedRounds) + 2;
  std::vector<uint64_t> released;
  for (int seq = 0; seq < rounds; ++seq) {
    table.AddInFlight(seq, NewRound(seq));
    for (uint64_t r : table.Finished(seq, /*completed=*/true,
                                     /*keep_completed=*/true)) {
      released.push_back(r);
    }
  }
  EXPECT_THAT(released, ElementsAre(0u, 1u));  // the oldest are pushed out
  EXPECT_EQ(table.CompletedCount(),
            static_cast<int>(RoundTable::kKeptCompletedRounds));
  EXPECT_EQ(table.Resumable(1), nullptr);
  EXPECT_NE(table.Resumable(2), nullptr);
  EXPECT_EQ(table.InFlight(2), nullptr);  // not in flight any more
  // Without resumes, a completed round is let go of too.
  table.AddInFlight(9, NewRound(9));
  EXPECT_THAT(table.Finished(9, true, /*keep_completed=*/false),
              ElementsAre(9u));
}

TEST(RoundTableTest, OutcomesAreBoundedInCountAndInBytes) {
  RoundTable table;
  const int count = static_cast<int>(RoundTable::kKeptOutcomes) + 10;
  for (int seq = 0; seq < count; ++seq) {
    table.KeepOutcome(seq, absl::OkStatus());
  }
  EXPECT_EQ(table.Outcome(9), nullptr);  // the oldest went first
  ASSERT_NE(table.Outcome(10), nullptr);
  EXPECT_TRUE(table.Outcome(count - 1)->ok());

  RoundTable big;
  const std::string long_message(100000, 'x');  // cut to 4 KiB when kept
  big.KeepOutcome(0, absl::InternalError(long_message));
  ASSERT_NE(big.Outcome(0), nullptr);
  EXPECT_LT(big.Outcome(0)->message().size(), 5000u);
  int seq = 1;
  for (; seq < 1000; ++seq)
    big.KeepOutcome(seq, absl::InternalError(long_message));
  size_t bytes = 0;
  int held = 0;
  for (int s = 0; s < seq; ++s) {
    if (const absl::Status* outcome = big.Outcome(s)) {
      bytes += outcome->message().size();
      ++held;
    }
  }
  EXPECT_LE(bytes, RoundTable::kKeptOutcomeBytes);
  EXPECT_GT(held, 100);  // about 1 MiB / 4 KiB of them
  EXPECT_NE(big.Outcome(seq - 1), nullptr);
}

TEST(RoundTableTest, AnEndedEpochFailsItsRoundsAndKeepsItsCompletedOnes) {
  RoundTable table;
  const std::shared_ptr<Round> in_flight = NewRound(1);
  table.AddInFlight(0, NewRound(0));
  table.Finished(0, /*completed=*/true, /*keep_completed=*/true);
  table.AddInFlight(1, in_flight);
  table.KeepOutcome(0, absl::OkStatus());
  PendingCallbacks callbacks;
  table.EndEpoch(1, {"a", "b"}, absl::UnavailableError("rank 1 left"),
                 &callbacks);
  EXPECT_EQ(in_flight->Failure(), absl::UnavailableError("rank 1 left"));
  EXPECT_EQ(table.InFlightCount(), 0);
  EXPECT_EQ(table.CompletedCount(), 0);
  EXPECT_EQ(table.Outcome(0), nullptr);

  // Its own rank resumes the completed round; another identity may not.
  absl::StatusOr<std::shared_ptr<Round>> found =
      table.FindEnded("g", "b", ResumeHeader(1, 0, 1));
  ASSERT_TRUE(found.ok());
  EXPECT_NE(*found, nullptr);
  found = table.FindEnded("g", "mallory", ResumeHeader(1, 0, 1));
  EXPECT_EQ(found.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(found.status().message()),
              HasSubstr("identity 'mallory' may not resume rank 1"));
  // Not a resume, another epoch, another seq or a rank past the world: none.
  v1::CollectiveHeader fresh = ResumeHeader(1, 0, 1);
  fresh.set_resume(false);
  EXPECT_EQ(*table.FindEnded("g", "b", fresh), nullptr);
  EXPECT_EQ(*table.FindEnded("g", "b", ResumeHeader(2, 0, 1)), nullptr);
  EXPECT_EQ(*table.FindEnded("g", "b", ResumeHeader(1, 1, 1)), nullptr);
  EXPECT_EQ(*table.FindEnded("g", "b", ResumeHeader(1, 0, 2)), nullptr);
}

TEST(RoundTableTest, FailInFlightFailsEveryRoundInFlightAndNamesIt) {
  RoundTable table;
  table.AddInFlight(3, NewRound(3));
  table.AddInFlight(4, NewRound(4));
  PendingCallbacks callbacks;
  EXPECT_THAT(
      table.FailInFlight(absl::StatusCode::kAborted, "was aborted", &callbacks),
      ElementsAre(3u, 4u));
  EXPECT_EQ(table.InFlight(4)->Failure(),
            absl::AbortedError("group 'g' epoch 1 seq 4 was aborted"));
}

}  // namespace
}  // namespace fedgather::server
