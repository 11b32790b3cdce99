#include "server/relay/fan_out_log.h"

#include <grpcpp/support/byte_buffer.h>

#include <string>

#include "gtest/gtest.h"

namespace fedgather::server {
namespace {

constexpr int64_t kCharge = FanOutLog::kFrameChargeBytes;

grpc::ByteBuffer Frame(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string Bytes(const grpc::ByteBuffer& buffer) {
  grpc::Slice flat;
  EXPECT_TRUE(buffer.DumpToSingleSlice(&flat).ok());
  return std::string(reinterpret_cast<const char*>(flat.begin()), flat.size());
}

FanOutLog MakeLog(int world, bool keep_tail = false,
                  int64_t window = int64_t{32} << 20,
                  int64_t max_buffered = int64_t{1} << 20) {
  FanOutLogOptions options;
  options.world = world;
  options.max_buffered_bytes = max_buffered;
  options.keep_tail = keep_tail;
  options.resume_window_bytes = window;
  return FanOutLog(options);
}

// Writes `rank`'s next frame and returns its bytes ("" at the end).
std::string WriteNext(FanOutLog& log, int rank, bool* released = nullptr) {
  const FanOutLog::Entry* entry = log.Next(rank);
  if (entry == nullptr) return "";
  std::string bytes = Bytes(entry->frame);
  bool dropped = false;
  log.Written(rank, &dropped);
  if (released != nullptr) *released = dropped;
  return bytes;
}

TEST(FanOutLogTest, EachReceiverWalksTheFramesOfTheOthersInOrder) {
  FanOutLog log = MakeLog(3);
  ASSERT_TRUE(log.Append(0, Frame("a0"), 2, 2));
  ASSERT_TRUE(log.Append(1, Frame("b0"), 2, 2));
  ASSERT_TRUE(log.Append(0, Frame("a1"), 2, 2));
  EXPECT_EQ(WriteNext(log, 1), "a0");
  EXPECT_EQ(WriteNext(log, 1), "a1");
  EXPECT_EQ(WriteNext(log, 1), "");
  EXPECT_EQ(WriteNext(log, 0), "b0");
  EXPECT_EQ(WriteNext(log, 0), "");
  EXPECT_EQ(WriteNext(log, 2), "a0");
  EXPECT_EQ(WriteNext(log, 2), "b0");
  EXPECT_EQ(WriteNext(log, 2), "a1");
  EXPECT_EQ(log.FramesFor(2), 3);
  EXPECT_EQ(log.FramesFor(0), 1);
}

TEST(FanOutLogTest, AFrameIsChargedUntilItsLastReceiverWroteIt) {
  FanOutLog log = MakeLog(3);
  ASSERT_TRUE(log.Append(0, Frame("abcd"), 4, 2));
  EXPECT_EQ(log.BufferedBytes(), 4 + kCharge);
  bool released = true;
  EXPECT_EQ(WriteNext(log, 1, &released), "abcd");
  EXPECT_FALSE(released);
  EXPECT_EQ(log.BufferedBytes(), 4 + kCharge);
  EXPECT_EQ(WriteNext(log, 2, &released), "abcd");
  EXPECT_TRUE(released);
  EXPECT_EQ(log.BufferedBytes(), 0);
  EXPECT_EQ(log.TailBytes(), 0);  // no tail kept: freed
}

TEST(FanOutLogTest, AFrameForNoReceiverIsDropped) {
  FanOutLog log = MakeLog(1);
  EXPECT_FALSE(log.Append(0, Frame("x"), 1, 0));
  EXPECT_EQ(log.size(), 0u);
  EXPECT_EQ(log.BufferedBytes(), 0);
}

TEST(FanOutLogTest, TakesAtMostMaxBufferedOverEntryBytesFrames) {
  FanOutLog log = MakeLog(2, false, 0, 3 * FanOutLog::kLogEntryBytes);
  EXPECT_EQ(log.MaxFrames(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(log.HasRoom());
    log.Append(0, Frame("x"), 1, 1);
  }
  EXPECT_FALSE(log.HasRoom());
}

TEST(FanOutLogTest, DroppedClaimsReleaseWhatOnlyThatRankLacked) {
  FanOutLog log = MakeLog(3);
  log.Append(0, Frame("a0"), 2, 2);
  log.Append(0, Frame("a1"), 2, 2);
  EXPECT_EQ(WriteNext(log, 1), "a0");
  EXPECT_EQ(WriteNext(log, 1), "a1");
  EXPECT_TRUE(log.DropClaims(2));
  EXPECT_EQ(log.BufferedBytes(), 0);
  EXPECT_FALSE(log.DropClaims(2));
}

TEST(FanOutLogTest, DroppedReceiversReleaseThePendingFrames) {
  FanOutLog log = MakeLog(3);
  log.Append(0, Frame("a0"), 2, 2);
  EXPECT_EQ(WriteNext(log, 1), "a0");
  EXPECT_TRUE(log.DropReceivers(1));
  EXPECT_EQ(log.BufferedBytes(), 0);
}

TEST(FanOutLogTest, TheTailKeepsReleasedFramesUpToTheWindow) {
  FanOutLog log = MakeLog(2, /*keep_tail=*/true, /*window=*/2 * (1 + kCharge));
  for (const char* bytes : {"a", "b", "c"}) {
    log.Append(0, Frame(bytes), 1, 1);
    WriteNext(log, 1);
  }
  EXPECT_EQ(log.BufferedBytes(), 0);
  EXPECT_EQ(log.TailBytes(), 2 * (1 + kCharge));  // "a" left the window
  EXPECT_TRUE(log.HasTail());
  log.ReleaseTail();
  EXPECT_FALSE(log.HasTail());
  EXPECT_EQ(log.TailBytes(), 0);
}

TEST(FanOutLogTest, AResumeClaimsAgainWhatTheClientNeverGot) {
  FanOutLog log = MakeLog(2, /*keep_tail=*/true);
  for (const char* bytes : {"a", "b", "c"}) log.Append(0, Frame(bytes), 1, 1);
  for (int i = 0; i < 3; ++i) WriteNext(log, 1);
  EXPECT_EQ(log.TailBytes(), 3 * (1 + kCharge));
  // The client got one frame: the next two are claimed again.
  const std::optional<size_t> cursor = log.ResumeCursor(1, 1);
  ASSERT_TRUE(cursor.has_value());
  EXPECT_EQ(*cursor, 1u);
  bool released = false;
  const std::optional<int64_t> resent = log.Reclaim(1, *cursor, &released);
  ASSERT_TRUE(resent.has_value());
  EXPECT_EQ(*resent, 2);
  EXPECT_FALSE(released);
  EXPECT_EQ(log.BufferedBytes(), 2 * (1 + kCharge));
  EXPECT_EQ(log.TailBytes(), 1 + kCharge);
  EXPECT_EQ(WriteNext(log, 1), "b");
  EXPECT_EQ(WriteNext(log, 1), "c");
  EXPECT_EQ(log.BufferedBytes(), 0);
}

TEST(FanOutLogTest, AResumePastTheOldCursorReleasesWhatArrived) {
  FanOutLog log = MakeLog(2, /*keep_tail=*/true);
  log.Append(0, Frame("a"), 1, 1);
  log.Append(0, Frame("b"), 1, 1);
  // The client got both, though no write was reported done.
  bool released = false;
  const std::optional<int64_t> resent = log.Reclaim(1, 2, &released);
  ASSERT_TRUE(resent.has_value());
  EXPECT_EQ(*resent, 0);
  EXPECT_TRUE(released);
  EXPECT_EQ(log.BufferedBytes(), 0);
  EXPECT_EQ(WriteNext(log, 1), "");
}

TEST(FanOutLogTest, AResumeAfterMoreFramesThanSentHasNoCursor) {
  FanOutLog log = MakeLog(2);
  log.Append(0, Frame("a"), 1, 1);
  log.Append(1, Frame("b"), 1, 1);
  EXPECT_FALSE(log.ResumeCursor(1, 2).has_value());
  EXPECT_EQ(log.ResumeCursor(1, 1), std::optional<size_t>(1));
}

TEST(FanOutLogTest, AResumeFailsForFramesAlreadyFreed) {
  FanOutLog log = MakeLog(2, /*keep_tail=*/false);
  log.Append(0, Frame("a"), 1, 1);
  WriteNext(log, 1);  // freed at once: no tail
  bool released = false;
  EXPECT_FALSE(log.Reclaim(1, 0, &released).has_value());
}

TEST(FanOutLogTest, ReplayedFramesSpillOldestFirstAndKeepTheirPlace) {
  FanOutLog log = MakeLog(2, false, 0, /*max_buffered=*/2 * (1 + kCharge));
  for (int i = 0; i < 3; ++i) {
    log.Append(0, Frame("x"), 1, 1);
    log.MarkLastReplayed(100 * i, 7);
    log.Spill(0);
  }
  EXPECT_EQ(log.BufferedBytes(), 2 * (1 + kCharge));
  const FanOutLog::Entry* first = log.Next(1);
  ASSERT_NE(first, nullptr);
  EXPECT_TRUE(first->spilled);
  EXPECT_EQ(first->journal_offset, 0);
  EXPECT_EQ(FanOutLog::FrameBytes(*first), 7);
  bool released = false;
  EXPECT_EQ(log.Written(1, &released), 7);
  EXPECT_TRUE(released);
}

TEST(FanOutLogTest, ClearFreesEveryFrame) {
  FanOutLog log = MakeLog(2, /*keep_tail=*/true);
  log.Append(0, Frame("a"), 1, 1);
  log.Append(0, Frame("b"), 1, 1);
  WriteNext(log, 1);
  log.Clear();
  EXPECT_EQ(log.BufferedBytes(), 0);
  EXPECT_EQ(log.TailBytes(), 0);
  EXPECT_FALSE(log.HasTail());
}

}  // namespace
}  // namespace fedgather::server
