// JournalFile: records come back as written; a torn or corrupt tail is cut,
// and appending after it continues the journal.
#include "server/journal/journal_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/file_io.h"

namespace fedgather::server {
namespace {

class JournalFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir = ::testing::TempDir() + "journal_test.XXXXXX";
    ASSERT_NE(::mkdtemp(dir.data()), nullptr);
    path_ = dir + "/j";
  }

  // Reads every intact record; `valid` gets the intact prefix's length.
  std::vector<JournalRecord> ReadAll(int64_t* valid = nullptr) {
    std::vector<JournalRecord> records;
    absl::StatusOr<int64_t> read = ReadJournal(path_, [&](JournalRecord r) {
      records.push_back(std::move(r));
      return absl::OkStatus();
    });
    EXPECT_TRUE(read.ok()) << read.status();
    if (valid != nullptr) *valid = read.value_or(-1);
    return records;
  }

  // Writes three records: a string, a two-slice frame and an empty one.
  void WriteThree() {
    absl::StatusOr<std::unique_ptr<JournalFile>> file =
        JournalFile::Create(path_);
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_TRUE((*file)->Append(1, 7, "first").ok());
    grpc::Slice slices[] = {grpc::Slice(std::string("fra")),
                            grpc::Slice(std::string("me"))};
    ASSERT_TRUE((*file)->Append(2, 0, grpc::ByteBuffer(slices, 2)).ok());
    ASSERT_TRUE((*file)->Append(3, 1, "").ok());
    ASSERT_TRUE((*file)->Sync().ok());
  }

  int64_t FileSize() { return ReadFileToString(path_).value_or("").size(); }

  std::string path_;
};

TEST_F(JournalFileTest, RecordsComeBackInOrderWithKindRankAndPayload) {
  WriteThree();
  int64_t valid = 0;
  const std::vector<JournalRecord> records = ReadAll(&valid);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].kind, 1);
  EXPECT_EQ(records[0].rank, 7u);
  EXPECT_EQ(records[0].payload, "first");
  EXPECT_EQ(records[1].kind, 2);
  EXPECT_EQ(records[1].payload, "frame");
  EXPECT_EQ(records[2].kind, 3);
  EXPECT_EQ(records[2].rank, 1u);
  EXPECT_EQ(records[2].payload, "");
  EXPECT_EQ(valid, FileSize());
}

TEST_F(JournalFileTest, ATornTailIsCutAndAppendingGoesOnAfterIt) {
  WriteThree();
  const int64_t whole = FileSize();
  // A crash mid-append: the last record (9 + 0 + 4 bytes) lost 2 bytes.
  ASSERT_EQ(::truncate(path_.c_str(), whole - 2), 0);
  int64_t valid = 0;
  EXPECT_EQ(ReadAll(&valid).size(), 2u);
  EXPECT_EQ(valid, whole - 13);

  absl::StatusOr<std::unique_ptr<JournalFile>> file =
      JournalFile::OpenForAppend(path_, valid);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE((*file)->Append(4, 2, "after").ok());
  const std::vector<JournalRecord> records = ReadAll();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[1].payload, "frame");
  EXPECT_EQ(records[2].kind, 4);
  EXPECT_EQ(records[2].payload, "after");
}

TEST_F(JournalFileTest, ACorruptRecordEndsTheIntactPrefix) {
  WriteThree();
  std::string bytes = ReadFileToString(path_).value();
  // Flip a payload byte of the second record ("frame", after the magic and
  // the first record of 9 + 5 + 4 bytes, and its own 9-byte header).
  const size_t at = 8 + 18 + 9 + 1;
  ASSERT_EQ(bytes[at], 'r');
  bytes[at] = 'R';
  ASSERT_TRUE(WriteStringToFile(path_, bytes).ok());
  int64_t valid = 0;
  const std::vector<JournalRecord> records = ReadAll(&valid);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].payload, "first");
  EXPECT_EQ(valid, 8 + 18);
}

TEST_F(JournalFileTest, AFileThatIsNotAJournalIsDataLoss) {
  ASSERT_TRUE(WriteStringToFile(path_, "hello, world").ok());
  absl::StatusOr<int64_t> read =
      ReadJournal(path_, [](JournalRecord) { return absl::OkStatus(); });
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find(path_), std::string::npos);
  EXPECT_EQ(ReadJournal(path_ + ".missing",
                        [](JournalRecord) { return absl::OkStatus(); })
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST_F(JournalFileTest, AnErrorFromTheReaderStopsTheRead) {
  WriteThree();
  int seen = 0;
  absl::StatusOr<int64_t> read = ReadJournal(path_, [&](JournalRecord) {
    return ++seen == 2 ? absl::DataLossError("no thanks") : absl::OkStatus();
  });
  EXPECT_EQ(read.status(), absl::DataLossError("no thanks"));
  EXPECT_EQ(seen, 2);
}

}  // namespace
}  // namespace fedgather::server
