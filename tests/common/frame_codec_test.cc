#include "common/frame_codec.h"

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fedgather {
namespace {

using ::testing::HasSubstr;

// Flattens a buffer's slices into one string.
std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& slice : slices) {
    out.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return out;
}

// Builds a buffer whose slices are `bytes` cut at `cuts` (ascending offsets).
grpc::ByteBuffer Sliced(const std::string& bytes,
                        const std::vector<size_t>& cuts) {
  std::vector<grpc::Slice> slices;
  size_t begin = 0;
  for (size_t cut : cuts) {
    slices.emplace_back(bytes.substr(begin, cut - begin));
    begin = cut;
  }
  slices.emplace_back(bytes.substr(begin));
  return grpc::ByteBuffer(slices.data(), slices.size());
}

grpc::ByteBuffer OneSlice(const std::string& bytes) {
  return Sliced(bytes, {});
}

std::string Payload(size_t size) {
  std::string payload(size, '\0');
  for (size_t i = 0; i < size; ++i) {
    payload[i] = static_cast<char>((i * 131 + 7) & 0xff);
  }
  return payload;
}

// Records what DecodeFrame hands it.
class RecordingSink : public ChunkSink {
 public:
  explicit RecordingSink(absl::Status begin_result = absl::OkStatus())
      : begin_result_(std::move(begin_result)) {}

  absl::Status Begin(const ChunkMeta& meta) override {
    ++begins;
    this->meta = meta;
    return begin_result_;
  }
  void Data(const uint8_t* data, size_t size) override {
    ++spans;
    bytes.append(reinterpret_cast<const char*>(data), size);
  }

  int begins = 0;
  int spans = 0;
  ChunkMeta meta;
  std::string bytes;

 private:
  absl::Status begin_result_;
};

// Checks that `kind` is a decoded chunk and that `sink` got exactly one, at
// (rank, tensor_index, offset) with `payload` as its bytes.
void ExpectOneChunk(const absl::StatusOr<v1::CollectiveFrame::KindCase>& kind,
                    const RecordingSink& sink, uint32_t rank,
                    uint32_t tensor_index, uint64_t offset,
                    const std::string& payload) {
  ASSERT_TRUE(kind.ok()) << kind.status();
  EXPECT_EQ(*kind, v1::CollectiveFrame::kChunk);
  EXPECT_EQ(sink.begins, 1);
  EXPECT_EQ(sink.meta.rank, rank);
  EXPECT_EQ(sink.meta.tensor_index, tensor_index);
  EXPECT_EQ(sink.meta.offset, offset);
  EXPECT_EQ(sink.meta.size, payload.size());
  EXPECT_EQ(sink.bytes, payload);
}

// Appends a protobuf varint.
void PutVarint(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// Wraps a Chunk message body as CollectiveFrame field 2.
std::string ChunkFrameBytes(const std::string& chunk_body) {
  std::string frame;
  frame.push_back(0x12);  // field 2 (chunk), length-delimited
  PutVarint(&frame, chunk_body.size());
  frame += chunk_body;
  return frame;
}

v1::CollectiveFrame ChunkMessage(uint32_t rank, uint32_t tensor,
                                 uint64_t offset, const std::string& data) {
  v1::CollectiveFrame frame;
  v1::Chunk* chunk = frame.mutable_chunk();
  chunk->set_rank(rank);
  chunk->set_tensor_index(tensor);
  chunk->set_offset(offset);
  chunk->set_data(data);
  return frame;
}

TEST(EncodeChunkFrameTest, StandardParserReadsTheSameChunk) {
  const std::string payload = Payload(1000);
  const ChunkMeta meta{3, 7, 123456789012ULL, payload.size()};
  const grpc::ByteBuffer buffer = EncodeChunkFrame(meta, payload.data());

  v1::CollectiveFrame parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(buffer)));
  ASSERT_EQ(parsed.kind_case(), v1::CollectiveFrame::kChunk);
  EXPECT_EQ(parsed.chunk().rank(), 3u);
  EXPECT_EQ(parsed.chunk().tensor_index(), 7u);
  EXPECT_EQ(parsed.chunk().offset(), 123456789012ULL);
  EXPECT_EQ(parsed.chunk().data(), payload);
}

TEST(EncodeChunkFrameTest, BytesEqualTheStandardSerializerForNonzeroFields) {
  // With every field non-zero the standard serializer writes all four, in
  // field order, as our encoder does, so the bytes must match exactly.
  const std::string payload = Payload(300);
  const ChunkMeta meta{2, 1, 300, payload.size()};
  const std::string expected =
      ChunkMessage(2, 1, 300, payload).SerializeAsString();
  EXPECT_EQ(Flatten(EncodeChunkFrame(meta, payload.data())), expected);
}

TEST(EncodeChunkFrameTest, ReferencesTheCallersMemory) {
  std::string payload = Payload(64);
  const grpc::ByteBuffer buffer =
      EncodeChunkFrame(ChunkMeta{0, 0, 0, payload.size()}, payload.data());
  payload[10] = 'X';  // the buffer holds no copy
  v1::CollectiveFrame parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(buffer)));
  EXPECT_EQ(parsed.chunk().data()[10], 'X');
}

TEST(EncodeChunkFrameTest, EmptyPayloadParses) {
  const grpc::ByteBuffer buffer =
      EncodeChunkFrame(ChunkMeta{1, 2, 3, 0}, nullptr);
  v1::CollectiveFrame parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(buffer)));
  ASSERT_EQ(parsed.kind_case(), v1::CollectiveFrame::kChunk);
  EXPECT_EQ(parsed.chunk().rank(), 1u);
  EXPECT_EQ(parsed.chunk().tensor_index(), 2u);
  EXPECT_EQ(parsed.chunk().offset(), 3u);
  EXPECT_TRUE(parsed.chunk().data().empty());
}

TEST(DecodeFrameTest, RoundTripsOurOwnEncoding) {
  const std::string payload = Payload(4096);
  grpc::ByteBuffer buffer =
      EncodeChunkFrame(ChunkMeta{5, 9, 8192, payload.size()}, payload.data());
  RecordingSink sink;
  v1::CollectiveFrame message;
  absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
      DecodeFrame(buffer, &message, &sink);
  ExpectOneChunk(kind, sink, 5u, 9u, 8192u, payload);
}

TEST(DecodeFrameTest, ChunkFromStandardSerializer) {
  const std::string payload = Payload(777);
  grpc::ByteBuffer buffer =
      OneSlice(ChunkMessage(4, 2, 1 << 20, payload).SerializeAsString());
  RecordingSink sink;
  v1::CollectiveFrame message;
  absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
      DecodeFrame(buffer, &message, &sink);
  ASSERT_TRUE(kind.ok()) << kind.status();
  EXPECT_EQ(*kind, v1::CollectiveFrame::kChunk);
  EXPECT_EQ(sink.meta.rank, 4u);
  EXPECT_EQ(sink.meta.tensor_index, 2u);
  EXPECT_EQ(sink.meta.offset, uint64_t{1} << 20);
  EXPECT_EQ(sink.meta.size, payload.size());
  EXPECT_EQ(sink.bytes, payload);
}

TEST(DecodeFrameTest, ZeroFieldsOmittedByStandardSerializer) {
  // proto3 omits zero scalars, so this chunk carries only its data field.
  const std::string payload = Payload(33);
  const std::string bytes = ChunkMessage(0, 0, 0, payload).SerializeAsString();
  ASSERT_EQ(bytes.size(),
            2 + 2 + payload.size());  // frame tag+len, data tag+len
  grpc::ByteBuffer buffer = OneSlice(bytes);
  RecordingSink sink;
  v1::CollectiveFrame message;
  absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
      DecodeFrame(buffer, &message, &sink);
  ASSERT_TRUE(kind.ok()) << kind.status();
  EXPECT_EQ(sink.meta.rank, 0u);
  EXPECT_EQ(sink.meta.tensor_index, 0u);
  EXPECT_EQ(sink.meta.offset, 0u);
  EXPECT_EQ(sink.bytes, payload);
}

TEST(DecodeFrameTest, DataBeforeLocationFields) {
  // The standard serializer always writes fields in number order, so craft
  // a chunk whose data (field 4) comes before rank, tensor_index and offset.
  const std::string payload = Payload(200);
  std::string body;
  body.push_back(0x22);  // data, length-delimited
  PutVarint(&body, payload.size());
  body += payload;
  body.push_back(0x08);  // rank
  PutVarint(&body, 2);
  body.push_back(0x10);  // tensor_index
  PutVarint(&body, 1);
  body.push_back(0x18);  // offset
  PutVarint(&body, 300);
  const std::string bytes = ChunkFrameBytes(body);

  // The standard parser agrees on what these bytes mean.
  v1::CollectiveFrame reference;
  ASSERT_TRUE(reference.ParseFromString(bytes));
  ASSERT_EQ(reference.chunk().data(), payload);

  for (const std::vector<size_t>& cuts :
       {std::vector<size_t>{},
        std::vector<size_t>{1, 50, 120, bytes.size() - 2}}) {
    grpc::ByteBuffer buffer = Sliced(bytes, cuts);
    RecordingSink sink;
    v1::CollectiveFrame message;
    absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
        DecodeFrame(buffer, &message, &sink);
    ExpectOneChunk(kind, sink, 2u, 1u, 300u, payload);
  }
}

TEST(DecodeFrameTest, DataBetweenLocationFields) {
  const std::string payload = Payload(17);
  std::string body;
  body.push_back(0x08);  // rank
  PutVarint(&body, 6);
  body.push_back(0x22);  // data
  PutVarint(&body, payload.size());
  body += payload;
  body.push_back(0x18);  // offset
  PutVarint(&body, 40);
  grpc::ByteBuffer buffer = OneSlice(ChunkFrameBytes(body));
  RecordingSink sink;
  v1::CollectiveFrame message;
  absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
      DecodeFrame(buffer, &message, &sink);
  ASSERT_TRUE(kind.ok()) << kind.status();
  EXPECT_EQ(sink.meta.rank, 6u);
  EXPECT_EQ(sink.meta.tensor_index, 0u);
  EXPECT_EQ(sink.meta.offset, 40u);
  EXPECT_EQ(sink.bytes, payload);
}

TEST(DecodeFrameTest, MultiSliceBuffersDecodeIdentically) {
  const std::string payload = Payload(5000);
  const std::string bytes =
      ChunkMessage(1, 3, 65536, payload).SerializeAsString();
  // Cut inside the frame tag/length, inside the location fields, inside the
  // data length varint and several times inside the payload.
  const std::vector<std::vector<size_t>> cut_sets = {
      {1},
      {2, 3, 4, 5, 6, 7, 8, 9, 10},
      {12, 1000, 1001, 4096},
      {bytes.size() - 1},
  };
  for (const std::vector<size_t>& cuts : cut_sets) {
    grpc::ByteBuffer buffer = Sliced(bytes, cuts);
    ASSERT_EQ(buffer.Length(), bytes.size());
    RecordingSink sink;
    v1::CollectiveFrame message;
    absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
        DecodeFrame(buffer, &message, &sink);
    ASSERT_TRUE(kind.ok()) << kind.status();
    EXPECT_EQ(sink.meta.rank, 1u);
    EXPECT_EQ(sink.meta.tensor_index, 3u);
    EXPECT_EQ(sink.meta.offset, 65536u);
    EXPECT_EQ(sink.meta.size, payload.size());
    EXPECT_EQ(sink.bytes, payload);
  }
}

TEST(DecodeFrameTest, PayloadSpanningSlicesArrivesAsSeveralSpans) {
  const std::string payload = Payload(3000);
  const std::string bytes = ChunkMessage(1, 1, 1, payload).SerializeAsString();
  const size_t payload_start = bytes.size() - payload.size();
  grpc::ByteBuffer buffer =
      Sliced(bytes, {payload_start + 1000, payload_start + 2000});
  RecordingSink sink;
  v1::CollectiveFrame message;
  ASSERT_TRUE(DecodeFrame(buffer, &message, &sink).ok());
  EXPECT_EQ(sink.bytes, payload);
  // Streamed out of the slices rather than gathered into one copy.
  EXPECT_EQ(sink.spans, 3);
}

TEST(DecodeFrameTest, EncodedEmptyChunkCallsBeginOnly) {
  grpc::ByteBuffer buffer = EncodeChunkFrame(ChunkMeta{1, 2, 8, 0}, nullptr);
  RecordingSink sink;
  v1::CollectiveFrame message;
  absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
      DecodeFrame(buffer, &message, &sink);
  ASSERT_TRUE(kind.ok()) << kind.status();
  EXPECT_EQ(sink.begins, 1);
  EXPECT_EQ(sink.spans, 0);
  EXPECT_EQ(sink.meta.size, 0u);
  EXPECT_EQ(sink.meta.offset, 8u);
}

TEST(DecodeFrameTest, NonChunkFramesParseIntoTheMessage) {
  v1::CollectiveFrame header;
  header.mutable_header()->set_group("demo");
  header.mutable_header()->set_seq(12);
  header.mutable_header()->set_op(v1::ALL_GATHER_V);
  v1::TensorSpec* spec = header.mutable_header()->add_tensors();
  spec->set_name("w");
  spec->set_dtype(v1::F32);
  spec->add_shape(4);
  grpc::ByteBuffer buffer = EncodeFrame(header);
  EXPECT_EQ(Flatten(buffer), header.SerializeAsString());

  v1::CollectiveFrame message;
  absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
      DecodeFrame(buffer, &message, /*sink=*/nullptr);
  ASSERT_TRUE(kind.ok()) << kind.status();
  EXPECT_EQ(*kind, v1::CollectiveFrame::kHeader);
  EXPECT_EQ(message.SerializeAsString(), header.SerializeAsString());

  v1::CollectiveFrame end;
  end.mutable_end()->set_rank(1);
  end.mutable_end()->set_digest(std::string(32, '\x5a'));
  grpc::ByteBuffer end_buffer = EncodeFrame(end);
  RecordingSink sink;
  v1::CollectiveFrame end_message;
  kind = DecodeFrame(end_buffer, &end_message, &sink);
  ASSERT_TRUE(kind.ok()) << kind.status();
  EXPECT_EQ(*kind, v1::CollectiveFrame::kEnd);
  EXPECT_EQ(end_message.end().digest(), std::string(32, '\x5a'));
  EXPECT_EQ(sink.begins, 0);
}

TEST(DecodeFrameTest, ChunkAfterAnotherFieldStillGoesToTheSink) {
  // A valid protobuf encoding may set another oneof member before the chunk
  // (the last one wins); the chunk must still reach the sink.
  const std::string payload = Payload(10);
  std::string bytes("\x0a\x00", 2);  // an empty header, overridden below
  bytes += ChunkMessage(1, 0, 4, payload).SerializeAsString();
  v1::CollectiveFrame reference;
  ASSERT_TRUE(reference.ParseFromString(bytes));
  ASSERT_EQ(reference.kind_case(), v1::CollectiveFrame::kChunk);

  grpc::ByteBuffer buffer = OneSlice(bytes);
  RecordingSink sink;
  v1::CollectiveFrame message;
  absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
      DecodeFrame(buffer, &message, &sink);
  ASSERT_TRUE(kind.ok()) << kind.status();
  EXPECT_EQ(*kind, v1::CollectiveFrame::kChunk);
  EXPECT_EQ(sink.begins, 1);
  EXPECT_EQ(sink.meta.rank, 1u);
  EXPECT_EQ(sink.meta.offset, 4u);
  EXPECT_EQ(sink.bytes, payload);

  grpc::ByteBuffer again = OneSlice(bytes);
  v1::CollectiveFrame unused;
  absl::StatusOr<v1::CollectiveFrame::KindCase> refused =
      DecodeFrame(again, &unused, /*sink=*/nullptr);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DecodeFrameTest, UnknownFieldInLateChunkIsRejected) {
  std::string body;
  body.push_back(0x28);  // field 5, varint: not part of Chunk
  PutVarint(&body, 1);
  body.push_back(0x22);
  PutVarint(&body, 1);
  body += "a";
  std::string bytes("\x0a\x00", 2);  // an empty header first
  bytes += ChunkFrameBytes(body);
  grpc::ByteBuffer buffer = OneSlice(bytes);
  RecordingSink sink;
  v1::CollectiveFrame message;
  absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
      DecodeFrame(buffer, &message, &sink);
  EXPECT_EQ(kind.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(kind.status().message()),
              HasSubstr("unknown fields"));
  EXPECT_EQ(sink.begins, 0);
}

TEST(DecodeFrameTest, SinkRejectionIsReturnedAndStopsData) {
  const std::string payload = Payload(100);
  grpc::ByteBuffer buffer =
      EncodeChunkFrame(ChunkMeta{0, 0, 0, payload.size()}, payload.data());
  RecordingSink sink(absl::OutOfRangeError("no room for this chunk"));
  v1::CollectiveFrame message;
  absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
      DecodeFrame(buffer, &message, &sink);
  EXPECT_EQ(kind.status(), absl::OutOfRangeError("no room for this chunk"));
  EXPECT_EQ(sink.spans, 0);
}

void ExpectInvalid(const std::string& bytes, ChunkSink* sink,
                   const std::string& expected_substring) {
  grpc::ByteBuffer buffer = OneSlice(bytes);
  v1::CollectiveFrame message;
  absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
      DecodeFrame(buffer, &message, sink);
  ASSERT_FALSE(kind.ok()) << "decoded as kind " << *kind;
  EXPECT_EQ(kind.status().code(), absl::StatusCode::kInvalidArgument)
      << kind.status();
  EXPECT_THAT(std::string(kind.status().message()),
              HasSubstr(expected_substring));
}

TEST(DecodeFrameTest, ChunkWithoutSinkIsRejected) {
  const std::string payload = Payload(8);
  ExpectInvalid(Flatten(EncodeChunkFrame(ChunkMeta{0, 0, 0, payload.size()},
                                         payload.data())),
                nullptr, "chunk");
}

TEST(DecodeFrameTest, EmptyFrameIsRejected) {
  RecordingSink sink;
  ExpectInvalid("", &sink, "empty");
  ExpectInvalid("", nullptr, "empty");
}

TEST(DecodeFrameTest, TruncatedPayloadIsRejected) {
  const std::string payload = Payload(64);
  const std::string bytes = Flatten(
      EncodeChunkFrame(ChunkMeta{1, 2, 3, payload.size()}, payload.data()));
  RecordingSink sink;
  ExpectInvalid(bytes.substr(0, bytes.size() - 1), &sink, "truncated");
}

TEST(DecodeFrameTest, TruncatedBeforeThePayloadIsRejected) {
  const std::string payload = Payload(64);
  const std::string bytes = Flatten(
      EncodeChunkFrame(ChunkMeta{1, 2, 3, payload.size()}, payload.data()));
  // Cut right after the location fields: the chunk's length promises more.
  for (size_t keep : {size_t{3}, size_t{6}, size_t{8}}) {
    RecordingSink sink;
    ExpectInvalid(bytes.substr(0, keep), &sink, "malformed");
    EXPECT_EQ(sink.begins, 0) << "keep " << keep;
  }
}

TEST(DecodeFrameTest, TruncatedEarlyPayloadIsRejected) {
  const std::string payload = Payload(20);
  std::string body;
  body.push_back(0x22);
  PutVarint(&body, payload.size());
  body += payload;
  body.push_back(0x08);
  PutVarint(&body, 1);
  const std::string bytes = ChunkFrameBytes(body);
  RecordingSink sink;
  ExpectInvalid(bytes.substr(0, 10), &sink, "malformed");
  EXPECT_EQ(sink.begins, 0);
}

TEST(DecodeFrameTest, UnknownFieldInChunkIsRejected) {
  std::string body;
  body.push_back(0x08);  // rank
  PutVarint(&body, 1);
  body.push_back(0x28);  // field 5, varint: not part of Chunk
  PutVarint(&body, 9);
  body.push_back(0x22);
  PutVarint(&body, 2);
  body += "ab";
  RecordingSink sink;
  ExpectInvalid(ChunkFrameBytes(body), &sink, "unexpected field");
}

TEST(DecodeFrameTest, WrongWireTypeInChunkIsRejected) {
  std::string body;
  body.push_back(0x0a);  // rank as length-delimited
  PutVarint(&body, 1);
  body += "x";
  RecordingSink sink;
  ExpectInvalid(ChunkFrameBytes(body), &sink, "unexpected field");
}

TEST(DecodeFrameTest, PayloadTwiceIsRejected) {
  std::string body;
  body.push_back(0x22);
  PutVarint(&body, 2);
  body += "ab";
  body.push_back(0x22);
  PutVarint(&body, 2);
  body += "cd";
  RecordingSink sink;
  ExpectInvalid(ChunkFrameBytes(body), &sink, "twice");
}

TEST(DecodeFrameTest, BytesAfterTheChunkAreRejected) {
  const std::string payload = Payload(4);
  std::string bytes = Flatten(
      EncodeChunkFrame(ChunkMeta{1, 0, 0, payload.size()}, payload.data()));
  bytes += "\x18\x01";  // a stray top-level field
  RecordingSink sink;
  ExpectInvalid(bytes, &sink, "after the chunk");
}

TEST(DecodeFrameTest, UnknownFieldInOtherFrameIsRejected) {
  v1::CollectiveFrame end;
  end.mutable_end()->set_rank(1);
  std::string bytes = end.SerializeAsString();
  bytes += "\x28\x07";  // field 5 of CollectiveFrame does not exist
  ExpectInvalid(bytes, nullptr, "unknown fields");
}

TEST(DecodeFrameTest, GarbageIsRejected) {
  RecordingSink sink;
  ExpectInvalid("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", &sink,
                "malformed");
  ExpectInvalid(std::string("\x0a\x05\x0a\x01", 4), &sink, "malformed");
}

// Issue 17, finding 8: a chunk length or payload length of 2^31 or more
// made PushLimit ignore the limit (it takes an int), so a 4 GiB payload
// length passed every check and reached the sink.
TEST(DecodeFrameTest, LengthsPastIntMaxAreRejectedBeforeTheSink) {
  for (uint64_t chunk_length : {uint64_t{0x80000000}, uint64_t{0xFFFFFFFF}}) {
    std::string frame;
    frame.push_back(0x12);  // CollectiveFrame.chunk
    PutVarint(&frame, chunk_length);
    frame.push_back(0x22);  // Chunk.data
    PutVarint(&frame, 0xFFFFFFFF);
    frame += "abc";
    RecordingSink sink;
    ExpectInvalid(frame, &sink, "malformed chunk frame");
    EXPECT_EQ(sink.begins, 0) << chunk_length;
  }
  // A sane chunk length with a payload length past it.
  std::string body;
  body.push_back(0x22);
  PutVarint(&body, 0xFFFFFFFF);
  body += "abc";
  RecordingSink sink;
  ExpectInvalid(ChunkFrameBytes(body), &sink, "exceeds the frame");
  EXPECT_EQ(sink.begins, 0);
}

}  // namespace
}  // namespace fedgather
