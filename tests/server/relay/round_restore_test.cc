// RestoreRound: a round rebuilt from its journal after the server died
// carries on as if nothing had happened. Ranks resume from the frames they
// had, each gets every other rank's bytes exactly once and in order, and a
// journal that lost frames a rank had already received fails the round
// with DATA_LOSS.
#include "server/relay/round_restore.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/file_io.h"
#include "gmock/gmock.h"
#include "server/journal/journal_file.h"
#include "server/relay/journal_recorder.h"
#include "tests/server/relay/round_harness.h"

namespace fedgather::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class RoundRestoreTest : public RoundHarness {
 protected:
  void SetUp() override {
    std::string dir = ::testing::TempDir() + "round_restore_test.XXXXXX";
    ASSERT_NE(::mkdtemp(dir.data()), nullptr);
    path_ = dir + "/round-0.journal";
    resume_grace_ = absl::Seconds(10);
  }

  // A journaled round of `world` ranks, as the server makes one.
  std::shared_ptr<Round> MakeJournaledRound(int world) {
    absl::StatusOr<std::unique_ptr<JournalFile>> journal =
        JournalFile::Create(path_);
    EXPECT_TRUE(journal.ok()) << journal.status();
    return std::make_shared<Round>(
        MakeOptions(world),
        std::make_unique<JournalRecorder>(*std::move(journal)));
  }

  // Restart: the round is gone with the server; a new one is restored from
  // its journal at t = 50 s. What the clients received stays theirs.
  std::shared_ptr<Round> Restart(std::shared_ptr<Round>& round, int world,
                                 int64_t max_buffered_bytes = int64_t{1}
                                                              << 20) {
    round.reset();
    const std::vector<Received> received = received_;
    absl::StatusOr<RestoredRound> restored =
        RestoreRound(MakeOptions(world, max_buffered_bytes), path_,
                     absl::FromUnixSeconds(50));
    received_ = received;
    EXPECT_TRUE(restored.ok()) << restored.status();
    if (!restored.ok()) return nullptr;
    EXPECT_GT(restored->journal_bytes, 0);
    return restored->round;
  }

  // Every rank got every other rank's header and chunks once, in order,
  // then the commit.
  void ExpectEveryRankGotEverything(int world) {
    for (int r = 0; r < world; ++r) {
      SCOPED_TRACE(absl::StrCat("receiver ", r));
      const Received& got = received_[r];
      for (int s = 0; s < world; ++s) {
        if (s == r) continue;
        std::vector<std::string> from_s;
        for (const std::string& entry : got.log) {
          if (entry == absl::StrCat("header ", s) ||
              absl::StartsWith(entry, absl::StrCat("chunk ", s, " "))) {
            from_s.push_back(entry);
          }
        }
        EXPECT_THAT(from_s, ElementsAre(absl::StrCat("header ", s),
                                        absl::StrCat("chunk ", s, " t0 @0"),
                                        absl::StrCat("chunk ", s, " t0 @4")));
        EXPECT_EQ(got.data_by_rank[s], payloads_[s]);
      }
      ASSERT_FALSE(got.log.empty());
      EXPECT_EQ(got.log.back(), "commit");
      EXPECT_TRUE(got.finished);
      EXPECT_TRUE(got.status.ok()) << got.status;
      ASSERT_EQ(got.commit.contributions_size(), world);
      for (int c = 0; c < world; ++c) {
        const Digest digest = DigestOf(c);
        EXPECT_EQ(got.commit.contributions(c).digest(),
                  std::string(digest.begin(), digest.end()));
      }
    }
  }

  uint64_t FramesReceived(int rank) const { return received_[rank].log.size(); }

  std::string path_;
};

TEST_F(RoundRestoreTest, AnAllGatherGoesOnWhereEachRankStopped) {
  std::shared_ptr<Round> round = MakeJournaledRound(3);
  ASSERT_TRUE(Attach(*round, 0).ok());
  ASSERT_TRUE(Attach(*round, 1).ok());
  EXPECT_TRUE(Offer(*round, 0, 0));
  EXPECT_TRUE(Offer(*round, 0, 1));
  End(*round, 0);
  EXPECT_TRUE(Offer(*round, 1, 0));
  Pump(*round, 1, &received_[1]);  // header 0 and both of rank 0's chunks
  EXPECT_EQ(PumpOne(*round, 0, &received_[0]), Outgoing::Kind::kFrame);
  ASSERT_EQ(FramesReceived(0), 1u);  // header 1
  ASSERT_EQ(FramesReceived(1), 3u);

  round = Restart(round, 3);
  ASSERT_NE(round, nullptr);
  EXPECT_FALSE(round->Finished());
  EXPECT_THAT(round->GetProgress().started, ElementsAre(0, 1));
  EXPECT_THAT(round->GetProgress().complete, ElementsAre(0));

  absl::StatusOr<Round::ResumePoint> zero =
      Resume(*round, 0, FramesReceived(0), DigestOf(0));
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_TRUE(zero->upload_ended);
  EXPECT_EQ(zero->upload_bytes, 8);
  absl::StatusOr<Round::ResumePoint> one =
      Resume(*round, 1, FramesReceived(1), DigestOf(1));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_FALSE(one->upload_ended);
  EXPECT_EQ(one->upload_bytes, 4);
  // The restored hash goes on over the rest of the upload.
  ContentHasher rest = *std::move(one->hasher);
  rest.Update(payloads_[1].data() + 4, 4);
  EXPECT_EQ(rest.Finish(), DigestOf(1));

  EXPECT_TRUE(Offer(*round, 1, 1));
  End(*round, 1);
  ASSERT_TRUE(Attach(*round, 2).ok());  // it never started before
  EXPECT_TRUE(Offer(*round, 2, 0));
  EXPECT_TRUE(Offer(*round, 2, 1));
  End(*round, 2);
  PumpAll(*round);
  ExpectEveryRankGotEverything(3);
  EXPECT_TRUE(round->Complete());
}

// Issue 18: a restart replayed a whole journal into memory (RSS 636 MiB
// after 600 MiB uploaded under --max-buffered-mib 4). A restored round holds
// no more than its limit; the frames that left memory are read back from
// the journal when each receiver reaches them, byte for byte.
// Rewrites the journal at `path` as a server did before end records named
// their algorithm: each kEndDigest record becomes a kEnd record holding the
// bare digest.
void RewriteEndsAsBareDigests(const std::string& path) {
  std::vector<JournalRecord> records;
  ASSERT_TRUE(ReadJournal(path, [&](JournalRecord record) {
                records.push_back(std::move(record));
                return absl::OkStatus();
              }).ok());
  std::unique_ptr<JournalFile> old = JournalFile::Create(path).value();
  for (JournalRecord& record : records) {
    if (record.kind == static_cast<uint8_t>(RoundRecord::kEndDigest)) {
      ASSERT_EQ(record.payload.size(), 33u);
      ASSERT_EQ(record.payload[0], static_cast<char>(v1::DIGEST_SHA256));
      record.kind = static_cast<uint8_t>(RoundRecord::kEnd);
      record.payload.erase(0, 1);
    }
    ASSERT_TRUE(old->Append(record.kind, record.rank, record.payload).ok());
  }
}

TEST_F(RoundRestoreTest, AJournalOfBareSha256EndsRestoresIntoASha256Epoch) {
  digest_ = DigestAlgorithm::kSha256;
  std::shared_ptr<Round> round = MakeJournaledRound(2);
  ASSERT_TRUE(Attach(*round, 0).ok());
  ASSERT_TRUE(Attach(*round, 1).ok());
  EXPECT_TRUE(Offer(*round, 0, 0));
  EXPECT_TRUE(Offer(*round, 0, 1));
  End(*round, 0);
  round.reset();
  RewriteEndsAsBareDigests(path_);

  // Into an epoch of BLAKE3 it cannot go: its end names a SHA-256.
  digest_ = DigestAlgorithm::kBlake3;
  const absl::Status refused =
      RestoreRound(MakeOptions(2), path_, absl::FromUnixSeconds(50)).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kDataLoss) << refused;
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("rank 0's end record holds a sha256 digest but the "
                        "epoch uses blake3"));

  digest_ = DigestAlgorithm::kSha256;
  round = Restart(round, 2);
  ASSERT_NE(round, nullptr);
  EXPECT_THAT(round->GetProgress().complete, ElementsAre(0));
  absl::StatusOr<Round::ResumePoint> zero = Resume(*round, 0, 0, DigestOf(0));
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_TRUE(zero->upload_ended);
  absl::StatusOr<Round::ResumePoint> one = Resume(*round, 1, 0, DigestOf(1));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE(Offer(*round, 1, 0));
  EXPECT_TRUE(Offer(*round, 1, 1));
  End(*round, 1);
  PumpAll(*round);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(received_[r].log.back(), "commit") << r;
    EXPECT_EQ(received_[r].commit.digest_algorithm(), v1::DIGEST_SHA256);
    EXPECT_EQ(received_[r].commit.contributions(0).digest(),
              DigestBytes(DigestOf(0)));
    EXPECT_EQ(received_[r].commit.contributions(1).digest(),
              DigestBytes(DigestOf(1)));
  }
}

TEST_F(RoundRestoreTest, ARestoredRoundHoldsNoMoreThanItsLimit) {
  std::shared_ptr<Round> round = MakeJournaledRound(3);
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(Attach(*round, r).ok());
  for (int r = 0; r < 2; ++r) {  // nobody reads
    EXPECT_TRUE(Offer(*round, r, 0));
    EXPECT_TRUE(Offer(*round, r, 1));
    End(*round, r);
  }
  const int64_t live = round->BufferedBytes();
  EXPECT_GT(live, 4 * kChunkCharge);  // three headers and four chunks
  const int64_t limit = 4 * kChunkCharge;
  round = Restart(round, 3, limit);
  ASSERT_NE(round, nullptr);
  EXPECT_LE(round->BufferedBytes(), limit);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(Resume(*round, r, 0, DigestOf(r)).ok()) << r;
  }
  Offer(*round, 2, 0);  // past the limit it pauses; the harness goes on
  Offer(*round, 2, 1);
  End(*round, 2);
  PumpAll(*round);
  ExpectEveryRankGotEverything(3);
}

TEST_F(RoundRestoreTest, ARoundRestoredTwiceStillHasEveryRecord) {
  std::shared_ptr<Round> round = MakeJournaledRound(2);
  ASSERT_TRUE(Attach(*round, 0).ok());
  EXPECT_TRUE(Offer(*round, 0, 0));
  round = Restart(round, 2);
  ASSERT_NE(round, nullptr);
  ASSERT_TRUE(Resume(*round, 0, 0, DigestOf(0)).ok());
  EXPECT_TRUE(Offer(*round, 0, 1));  // journaled after the first restart
  End(*round, 0);
  round = Restart(round, 2);
  ASSERT_NE(round, nullptr);
  absl::StatusOr<Round::ResumePoint> zero = Resume(*round, 0, 0, DigestOf(0));
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_TRUE(zero->upload_ended);
  ASSERT_TRUE(Attach(*round, 1).ok());
  EXPECT_TRUE(Offer(*round, 1, 0));
  EXPECT_TRUE(Offer(*round, 1, 1));
  End(*round, 1);
  PumpAll(*round);
  ExpectEveryRankGotEverything(2);
}

TEST_F(RoundRestoreTest, AnAllReduceKeepsWhatItHadReduced) {
  std::shared_ptr<Round> round = MakeJournaledRound(2);
  ASSERT_TRUE(AttachReduce(*round, 0, v1::SUM).ok());
  ASSERT_TRUE(AttachReduce(*round, 1, v1::SUM).ok());
  const std::vector<float> in0 = {1.5f, -2}, in1 = {10, 20.25f};
  EXPECT_TRUE(OfferReduce(*round, 0, in0));
  EndWith(*round, 0, in0);

  round = Restart(round, 2);
  ASSERT_NE(round, nullptr);
  ContentHasher hash0(DigestAlgorithm::kBlake3),
      hash1(DigestAlgorithm::kBlake3);
  hash0.Update(in0.data(), 8);
  hash1.Update(in1.data(), 8);
  absl::StatusOr<Round::ResumePoint> zero =
      Resume(*round, 0, 0, hash0.Finish(), v1::SUM);
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_TRUE(zero->upload_ended);
  absl::StatusOr<Round::ResumePoint> one =
      Resume(*round, 1, 0, hash1.Finish(), v1::SUM);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->upload_bytes, 0);
  EXPECT_TRUE(OfferReduce(*round, 1, in1));
  EndWith(*round, 1, in1);
  PumpAll(*round);
  const std::vector<float> sum = {11.5f, 18.25f};
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_THAT(received_[r].log, ElementsAre("chunk 2 t0 @0", "commit"));
    EXPECT_EQ(received_[r].data_by_rank[2],
              std::string(reinterpret_cast<const char*>(sum.data()), 8));
  }
}

TEST_F(RoundRestoreTest, AClosedQuorumStaysClosed) {
  min_quorum_ = 2;
  quorum_deadline_ = absl::FromUnixSeconds(100);
  std::shared_ptr<Round> round = MakeJournaledRound(3);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(Attach(*round, r).ok());
    EXPECT_TRUE(Offer(*round, r, 0));
    EXPECT_TRUE(Offer(*round, r, 1));
    End(*round, r);
  }
  CheckDeadline(*round, absl::FromUnixSeconds(100));
  ASSERT_TRUE(round->Complete());

  round = Restart(round, 3);
  ASSERT_NE(round, nullptr);
  EXPECT_TRUE(round->Complete());
  const absl::Status late = Attach(*round, 2);
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition) << late;
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(Resume(*round, r, 0, DigestOf(r)).ok());
    Pump(*round, r, &received_[r]);
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_EQ(received_[r].data_by_rank[1 - r], payloads_[1 - r]);
    EXPECT_EQ(received_[r].log.back(), "commit");
    EXPECT_EQ(received_[r].commit.contributions_size(), 2);
  }
}

// The restore itself took 8 s (restored at t = 50 s, listening at 58 s):
// the ranks still have their whole 10 s grace from 58 s. Before
// StartResumeGrace, the grace ran from 50 s, and a loaded server that took
// most of it to replay its journals lost ranks that came back in time.
TEST_F(RoundRestoreTest, TheResumeGraceStartsWhenTheServerListens) {
  std::shared_ptr<Round> round = MakeJournaledRound(2);
  ASSERT_TRUE(Attach(*round, 0).ok());
  ASSERT_TRUE(Attach(*round, 1).ok());
  EXPECT_TRUE(Offer(*round, 0, 0));
  round = Restart(round, 2);
  ASSERT_NE(round, nullptr);
  round->StartResumeGrace(absl::FromUnixSeconds(58));
  CheckDeadline(*round, absl::FromUnixSeconds(67));
  EXPECT_FALSE(round->Finished()) << "failed 9 s after the server listened";
  ASSERT_TRUE(Resume(*round, 0, 0, DigestOf(0)).ok());
  CheckDeadline(*round, absl::FromUnixSeconds(68));
  ASSERT_TRUE(round->Finished());
  Pump(*round, 0, &received_[0]);
  EXPECT_EQ(received_[0].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(received_[0].status.message()),
              HasSubstr("rank 1 (site-b) lost its collective stream and did "
                        "not resume it within 10s"));
}

TEST_F(RoundRestoreTest, FramesTheJournalLostFailTheRoundWithDataLoss) {
  std::shared_ptr<Round> round = MakeJournaledRound(2);
  ASSERT_TRUE(Attach(*round, 0).ok());
  ASSERT_TRUE(Attach(*round, 1).ok());
  EXPECT_TRUE(Offer(*round, 0, 0));
  EXPECT_TRUE(Offer(*round, 0, 1));
  Pump(*round, 1, &received_[1]);
  ASSERT_EQ(FramesReceived(1), 3u);
  // The machine lost power: the last chunk never reached the disk (a torn
  // record), though rank 1 had received it.
  round.reset();
  const int64_t size = ReadFileToString(path_).value().size();
  ASSERT_EQ(::truncate(path_.c_str(), size - 3), 0);
  round = Restart(round, 2);
  ASSERT_NE(round, nullptr);
  const absl::StatusOr<Round::ResumePoint> lost =
      Resume(*round, 1, FramesReceived(1), DigestOf(1));
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(lost.status().message()),
              HasSubstr("rank 1 (site-b) resumes after 3 frames, but the "
                        "server's journal held 2 for it"));
  EXPECT_TRUE(round->Finished());
  EXPECT_FALSE(round->Complete());
  // Rank 0 learns the same.
  EXPECT_EQ(Resume(*round, 0, 0, DigestOf(0)).status(), lost.status());
}

TEST_F(RoundRestoreTest, ADamagedJournalIsDataLossNamingIt) {
  {
    absl::StatusOr<std::unique_ptr<JournalFile>> journal =
        JournalFile::Create(path_);
    ASSERT_TRUE(journal.ok());
    ASSERT_TRUE((*journal)->Append(1, /*rank=*/9, "header").ok());
  }
  absl::StatusOr<RestoredRound> restored =
      RestoreRound(MakeOptions(2), path_, absl::FromUnixSeconds(50));
  EXPECT_EQ(restored.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(restored.status().message()),
              HasSubstr(absl::StrCat("journal ", path_)));
  EXPECT_THAT(std::string(restored.status().message()),
              HasSubstr("a record names rank 9"));
}

}  // namespace
}  // namespace fedgather::server
