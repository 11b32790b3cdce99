// GroupJournal: what one run writes, the next run's Load reads back; an
// ended epoch leaves only its number; other groups' state is dropped.
#include "server/journal/group_journal.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"

namespace fedgather::server {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class GroupJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "group_journal_test.XXXXXX";
    ASSERT_NE(::mkdtemp(dir_.data()), nullptr);
  }

  // Open and Load, as a (re)started server does.
  std::unique_ptr<GroupJournal> Reopen(const std::string& group,
                                       GroupJournal::Saved* saved) {
    absl::StatusOr<std::unique_ptr<GroupJournal>> journal =
        GroupJournal::Open(dir_, group);
    EXPECT_TRUE(journal.ok()) << journal.status();
    if (!journal.ok()) return nullptr;
    absl::StatusOr<GroupJournal::Saved> loaded = (*journal)->Load();
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    if (loaded.ok()) *saved = *std::move(loaded);
    return *std::move(journal);
  }

  static bool Exists(const std::string& path) {
    return ::access(path.c_str(), F_OK) == 0;
  }

  std::string dir_;
};

TEST_F(GroupJournalTest, AFormedEpochComesBackWithItsProgress) {
  GroupJournal::Saved saved;
  std::unique_ptr<GroupJournal> journal = Reopen("demo", &saved);
  ASSERT_NE(journal, nullptr);
  EXPECT_FALSE(saved.formed);
  EXPECT_EQ(saved.epoch, 0u);

  ASSERT_TRUE(
      journal->Formed(3, DigestAlgorithm::kBlake3, {"site-1", "site\n2"}).ok());
  ASSERT_TRUE(journal->Started(0, 0).ok());
  ASSERT_TRUE(journal->Started(1, 0).ok());
  ASSERT_TRUE(journal->Started(0, 1).ok());
  ASSERT_TRUE(journal->Finished(0, absl::OkStatus()).ok());
  ASSERT_TRUE(
      journal->Finished(1, absl::DeadlineExceededError("rank 1\nis late"))
          .ok());
  ASSERT_TRUE(journal->CreateRoundJournal(2).ok());
  journal.reset();  // the server dies

  journal = Reopen("demo", &saved);
  ASSERT_NE(journal, nullptr);
  EXPECT_TRUE(saved.formed);
  EXPECT_EQ(saved.epoch, 3u);
  EXPECT_THAT(saved.identities, ElementsAre("site-1", "site\n2"));
  EXPECT_EQ(saved.digest, DigestAlgorithm::kBlake3);
  EXPECT_THAT(saved.next_seq, ElementsAre(2u, 1u));
  ASSERT_EQ(saved.outcomes.size(), 2u);
  EXPECT_TRUE(saved.outcomes[0].ok());
  EXPECT_EQ(saved.outcomes[1], absl::DeadlineExceededError("rank 1\nis late"));
  ASSERT_EQ(saved.rounds.size(), 1u);
  EXPECT_EQ(saved.rounds[2], journal->directory() + "/round-2.journal");

  // The reopened journal appends where the last run stopped.
  ASSERT_TRUE(journal->Started(1, 4).ok());
  journal = Reopen("demo", &saved);
  EXPECT_THAT(saved.next_seq, ElementsAre(2u, 5u));
}

// A journal written before epochs named their digest algorithm (a kFormed
// record, kind 1) restores as a SHA-256 epoch.
TEST_F(GroupJournalTest, AnEpochFormedBeforeDigestsWereNamedIsSha256) {
  GroupJournal::Saved saved;
  std::unique_ptr<GroupJournal> journal = Reopen("demo", &saved);
  ASSERT_NE(journal, nullptr);
  const std::string path = journal->directory() + "/epoch.journal";
  journal.reset();
  {
    std::unique_ptr<JournalFile> old = JournalFile::Create(path).value();
    ASSERT_TRUE(old->Append(/*kFormed=*/1, 0, "4\nsite-1\nsite-2").ok());
  }
  journal = Reopen("demo", &saved);
  EXPECT_TRUE(saved.formed);
  EXPECT_EQ(saved.epoch, 4u);
  EXPECT_EQ(saved.digest, DigestAlgorithm::kSha256);
  EXPECT_THAT(saved.identities, ElementsAre("site-1", "site-2"));

  // A new epoch names its algorithm, and an unknown one is refused.
  ASSERT_TRUE(journal->Formed(5, DigestAlgorithm::kSha256, {"a"}).ok());
  journal = Reopen("demo", &saved);
  EXPECT_EQ(saved.digest, DigestAlgorithm::kSha256);
  journal.reset();
  {
    std::unique_ptr<JournalFile> odd = JournalFile::Create(path).value();
    ASSERT_TRUE(odd->Append(/*kFormedWithDigest=*/5, 0, "6\nmd5\na").ok());
  }
  absl::StatusOr<GroupJournal::Saved> refused =
      GroupJournal::Open(dir_, "demo").value()->Load();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr("names digest 'md5'"));
}

TEST_F(GroupJournalTest, AnEndedEpochLeavesOnlyItsNumber) {
  GroupJournal::Saved saved;
  std::unique_ptr<GroupJournal> journal = Reopen("demo", &saved);
  ASSERT_TRUE(journal->Formed(1, DigestAlgorithm::kBlake3, {"a", "b"}).ok());
  ASSERT_TRUE(journal->CreateRoundJournal(0).ok());
  const std::string round = journal->directory() + "/round-0.journal";
  EXPECT_TRUE(Exists(round));
  ASSERT_TRUE(journal->Ended(1).ok());
  EXPECT_FALSE(Exists(round));

  journal = Reopen("demo", &saved);
  EXPECT_FALSE(saved.formed);
  EXPECT_EQ(saved.epoch, 1u);
  EXPECT_THAT(saved.identities, IsEmpty());
  EXPECT_THAT(saved.rounds, IsEmpty());
}

TEST_F(GroupJournalTest, ANewEpochDiscardsThePreviousRounds) {
  GroupJournal::Saved saved;
  std::unique_ptr<GroupJournal> journal = Reopen("demo", &saved);
  ASSERT_TRUE(journal->Formed(1, DigestAlgorithm::kBlake3, {"a"}).ok());
  ASSERT_TRUE(journal->CreateRoundJournal(5).ok());
  ASSERT_TRUE(journal->Formed(2, DigestAlgorithm::kBlake3, {"a"}).ok());
  journal = Reopen("demo", &saved);
  EXPECT_EQ(saved.epoch, 2u);
  EXPECT_THAT(saved.rounds, IsEmpty());
}

TEST_F(GroupJournalTest, GroupNamesAreEscapedAndUnlistedGroupsDropped) {
  EXPECT_EQ(EscapeGroupName("a-b_C9"), "a-b_C9");
  EXPECT_EQ(EscapeGroupName("../x y"), "%2E%2E%2Fx%20y");
  GroupJournal::Saved saved;
  std::unique_ptr<GroupJournal> kept = Reopen("kept", &saved);
  std::unique_ptr<GroupJournal> gone = Reopen("../gone", &saved);
  ASSERT_TRUE(kept->Formed(1, DigestAlgorithm::kBlake3, {"a"}).ok());
  ASSERT_TRUE(gone->Formed(1, DigestAlgorithm::kBlake3, {"a"}).ok());
  ASSERT_TRUE(gone->CreateRoundJournal(0).ok());
  EXPECT_EQ(gone->directory(), dir_ + "/groups/%2E%2E%2Fgone");
  DropGroupStatesExcept(dir_, {"kept"});
  EXPECT_TRUE(Exists(kept->directory() + "/epoch.journal"));
  EXPECT_FALSE(Exists(gone->directory()));
}

}  // namespace
}  // namespace fedgather::server
