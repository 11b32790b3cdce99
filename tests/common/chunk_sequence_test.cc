#include "common/chunk_sequence.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/fingerprint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fedgather {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// a: 24 bytes, empty: 0 bytes, b: 5 bytes.
Fingerprint ThreeTensors() {
  return {
      TensorSpec{"a", DType::kF32, {2, 3}},
      TensorSpec{"empty", DType::kF32, {0}},
      TensorSpec{"b", DType::kI8, {5}},
  };
}

void ExpectInvalid(const absl::Status& status,
                   const std::vector<std::string>& substrings) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  for (const std::string& s : substrings) {
    EXPECT_THAT(std::string(status.message()), HasSubstr(s));
  }
}

TEST(ChunkSequenceTest, AcceptsInOrderAndSkipsEmptyTensors) {
  const Fingerprint fingerprint = ThreeTensors();
  ChunkSequence sequence(fingerprint, /*max_chunk_bytes=*/10);
  EXPECT_THAT(sequence.tensor_bytes(), ElementsAre(24, 0, 5));
  EXPECT_EQ(sequence.total_bytes(), 29);
  EXPECT_EQ(sequence.bytes_done(), 0);

  EXPECT_TRUE(sequence.Accept(0, 0, 10).ok());
  EXPECT_TRUE(sequence.Accept(0, 10, 10).ok());
  EXPECT_TRUE(sequence.Accept(0, 20, 4).ok());
  EXPECT_EQ(sequence.bytes_done(), 24);
  // Tensor 1 holds no bytes, so the next chunk is tensor 2's first.
  EXPECT_TRUE(sequence.Accept(2, 0, 5).ok());
  EXPECT_EQ(sequence.bytes_done(), 29);
  EXPECT_TRUE(sequence.CheckComplete().ok());
}

TEST(ChunkSequenceTest, ChunkForEmptyTensorIsOutOfOrder) {
  const Fingerprint fingerprint = ThreeTensors();
  ChunkSequence sequence(fingerprint, 100);
  ASSERT_TRUE(sequence.Accept(0, 0, 24).ok());
  ExpectInvalid(sequence.Accept(1, 0, 1),
                {"chunk for tensor 1 at offset 0 is out of order",
                 "expected tensor 2 ('b') at offset 0"});
}

TEST(ChunkSequenceTest, OutOfOrderOffsetIsRejectedAndLeavesStateUnchanged) {
  const Fingerprint fingerprint = ThreeTensors();
  ChunkSequence sequence(fingerprint, 10);
  ASSERT_TRUE(sequence.Accept(0, 0, 8).ok());
  ExpectInvalid(sequence.Accept(0, 12, 4),
                {"chunk for tensor 0 at offset 12 is out of order",
                 "expected tensor 0 ('a') at offset 8"});
  ExpectInvalid(sequence.Accept(0, 0, 4),
                {"at offset 0 is out of order", "('a') at offset 8"});
  EXPECT_EQ(sequence.bytes_done(), 8);
  // The expected chunk is still accepted after the refusals.
  EXPECT_TRUE(sequence.Accept(0, 8, 4).ok());
  EXPECT_EQ(sequence.bytes_done(), 12);
}

TEST(ChunkSequenceTest, LaterTensorFirstIsOutOfOrder) {
  const Fingerprint fingerprint = ThreeTensors();
  ChunkSequence sequence(fingerprint, 10);
  ExpectInvalid(sequence.Accept(2, 0, 5),
                {"chunk for tensor 2 at offset 0 is out of order",
                 "expected tensor 0 ('a') at offset 0"});
}

TEST(ChunkSequenceTest, ChunkPastDeclaredSizeIsRejected) {
  const Fingerprint fingerprint = ThreeTensors();
  ChunkSequence sequence(fingerprint, 10);
  ASSERT_TRUE(sequence.Accept(0, 0, 10).ok());
  ASSERT_TRUE(sequence.Accept(0, 10, 10).ok());
  ExpectInvalid(sequence.Accept(0, 20, 5),
                {"chunk of 5 bytes at offset 20 of tensor 'a'",
                 "runs past its declared size of 24 bytes (a:F32[2, 3])"});
  EXPECT_EQ(sequence.bytes_done(), 20);
}

TEST(ChunkSequenceTest, ZeroSizeChunkIsRejected) {
  const Fingerprint fingerprint = ThreeTensors();
  ChunkSequence sequence(fingerprint, 10);
  ExpectInvalid(sequence.Accept(0, 0, 0), {"chunk of 0 bytes for tensor 'a'",
                                           "chunks must hold 1 to 10 bytes"});
}

TEST(ChunkSequenceTest, OversizeChunkIsRejected) {
  const Fingerprint fingerprint = ThreeTensors();
  ChunkSequence sequence(fingerprint, 10);
  ExpectInvalid(sequence.Accept(0, 0, 11), {"chunk of 11 bytes for tensor 'a'",
                                            "chunks must hold 1 to 10 bytes"});
  EXPECT_TRUE(sequence.Accept(0, 0, 10).ok());
}

TEST(ChunkSequenceTest, ChunkAfterEverythingIsRejected) {
  const Fingerprint fingerprint = ThreeTensors();
  ChunkSequence sequence(fingerprint, 100);
  ASSERT_TRUE(sequence.Accept(0, 0, 24).ok());
  ASSERT_TRUE(sequence.Accept(2, 0, 5).ok());
  ExpectInvalid(sequence.Accept(2, 5, 1),
                {"chunk for tensor 2 at offset 5",
                 "after all 29 declared bytes were sent"});
}

TEST(ChunkSequenceTest, CheckCompleteReportsProgress) {
  const Fingerprint fingerprint = ThreeTensors();
  ChunkSequence sequence(fingerprint, 10);
  ExpectInvalid(sequence.CheckComplete(),
                {"tensor 'a' has 0 of 24 bytes; 0 of 29 bytes in all"});
  ASSERT_TRUE(sequence.Accept(0, 0, 10).ok());
  ExpectInvalid(sequence.CheckComplete(),
                {"contribution ended early",
                 "tensor 'a' has 10 of 24 bytes; 10 of 29 bytes in all"});
  ASSERT_TRUE(sequence.Accept(0, 10, 10).ok());
  ASSERT_TRUE(sequence.Accept(0, 20, 4).ok());
  ExpectInvalid(sequence.CheckComplete(),
                {"tensor 'b' has 0 of 5 bytes; 24 of 29 bytes in all"});
}

TEST(ChunkSequenceTest, LeadingEmptyTensorsAreSkipped) {
  const Fingerprint fingerprint = {
      TensorSpec{"e0", DType::kF32, {0, 4}},
      TensorSpec{"e1", DType::kI64, {3, 0}},
      TensorSpec{"x", DType::kU8, {3}},
  };
  ChunkSequence sequence(fingerprint, 10);
  ExpectInvalid(sequence.Accept(0, 0, 1),
                {"expected tensor 2 ('x') at offset 0"});
  EXPECT_TRUE(sequence.Accept(2, 0, 3).ok());
  EXPECT_TRUE(sequence.CheckComplete().ok());
}

TEST(ChunkSequenceTest, AllEmptyIsCompleteAtOnce) {
  const Fingerprint fingerprint = {TensorSpec{"e", DType::kF32, {0}}};
  ChunkSequence sequence(fingerprint, 10);
  EXPECT_EQ(sequence.total_bytes(), 0);
  EXPECT_TRUE(sequence.CheckComplete().ok());
  ExpectInvalid(sequence.Accept(0, 0, 1),
                {"after all 0 declared bytes were sent"});
}

// Issue 17, finding 6: chunks may be smaller than the limit, so a resumed
// upload may go on from any byte the server holds, not only from multiples
// of the chunk limit.
TEST(ChunkSequenceTest, SkipToGoesOnFromAnyByte) {
  const Fingerprint fingerprint = ThreeTensors();
  for (int64_t held : {0, 3, 10, 23, 24, 26, 29}) {
    ChunkSequence sequence(fingerprint, /*max_chunk_bytes=*/10);
    ASSERT_TRUE(sequence.SkipTo(held).ok()) << held;
    EXPECT_EQ(sequence.bytes_done(), held);
    if (held < 24) {
      EXPECT_TRUE(
          sequence.Accept(0, held, 24 - held > 10 ? 10 : 24 - held).ok())
          << held;
    } else if (held < 29) {
      EXPECT_TRUE(sequence.Accept(2, held - 24, 29 - held).ok()) << held;
      EXPECT_TRUE(sequence.CheckComplete().ok());
    } else {
      EXPECT_TRUE(sequence.CheckComplete().ok());
    }
  }
  ChunkSequence past(fingerprint, 10);
  ExpectInvalid(past.SkipTo(30), {"cannot resume at byte 30 of 29"});
  ExpectInvalid(past.SkipTo(-1), {"cannot resume"});
}

}  // namespace
}  // namespace fedgather
