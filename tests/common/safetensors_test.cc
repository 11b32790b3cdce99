#include "common/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace fedgather {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr absl::string_view kSource = "bad.safetensors";

std::string Le64(uint64_t value) {
  std::string out;
  for (int i = 0; i < 8; ++i) {
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
  return out;
}

// MakeFile lays out a file as the reference implementation does: u64 LE
// header length, header, data.
std::string MakeFile(absl::string_view header, absl::string_view data) {
  return absl::StrCat(Le64(header.size()), header, data);
}

std::string AsString(absl::Span<const uint8_t> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// PatternBytes returns `n` deterministic bytes that differ per `seed`.
std::string PatternBytes(size_t n, int seed) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) {
    out[i] =
        static_cast<char>((i * 31 + static_cast<size_t>(seed) * 7 + 3) & 0xff);
  }
  return out;
}

// A tensor together with the bytes its view points at.
struct OwnedTensor {
  TensorSpec spec;
  std::string bytes;
};

OwnedTensor MakeTensor(std::string name, DType dtype,
                       std::vector<int64_t> shape, int seed) {
  OwnedTensor t;
  t.spec = {std::move(name), dtype, std::move(shape)};
  t.bytes = PatternBytes(static_cast<size_t>(ByteSize(t.spec).value()), seed);
  return t;
}

std::vector<ConstHostTensor> ViewsOf(const std::vector<OwnedTensor>& owned) {
  std::vector<ConstHostTensor> views;
  for (const OwnedTensor& t : owned) {
    views.push_back({t.spec, t.bytes.data()});
  }
  return views;
}

uint64_t HeaderLength(const std::string& file) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(file[i]);
  return n;
}

std::vector<OwnedTensor> EveryDTypeTensors() {
  const std::vector<std::pair<DType, std::vector<int64_t>>> cases = {
      {DType::kF32, {2, 3}},
      {DType::kF16, {3, 1, 2}},
      {DType::kBF16, {4}},
      {DType::kF64, {1, 2, 2, 1}},
      {DType::kI64, {5, 1}},
      {DType::kI32, {2, 2, 2}},
      {DType::kI16, {7}},
      {DType::kI8, {3, 3}},
      {DType::kU8, {1, 1, 1, 1, 5}},
      {DType::kBool, {6, 1}},
  };
  std::vector<OwnedTensor> tensors;
  int seed = 0;
  // Given in descending name order to show tensors() sorts while data keeps
  // the given order.
  tensors.push_back(MakeTensor("z.scalar", DType::kF64, {}, seed++));
  tensors.push_back(MakeTensor("y.empty", DType::kF32, {2, 0, 3}, seed++));
  for (auto it = cases.rbegin(); it != cases.rend(); ++it) {
    tensors.push_back(MakeTensor(absl::StrCat("t.", DTypeName(it->first)),
                                 it->first, it->second, seed++));
  }
  return tensors;
}

TEST(SafetensorsTest, RoundTripsEveryDType) {
  const std::vector<OwnedTensor> tensors = EveryDTypeTensors();
  absl::StatusOr<std::string> file = SerializeSafetensors(ViewsOf(tensors), {});
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<SafetensorsFile> parsed =
      SafetensorsFile::Parse(*file, "roundtrip");
  ASSERT_TRUE(parsed.ok()) << parsed.status();

  std::map<std::string, const OwnedTensor*> by_name;
  for (const OwnedTensor& t : tensors) by_name[t.spec.name] = &t;
  ASSERT_EQ(parsed->tensors().size(), tensors.size());
  auto expected = by_name.begin();
  for (const SafetensorsEntry& entry : parsed->tensors()) {
    SCOPED_TRACE(entry.spec.name);
    EXPECT_EQ(entry.spec, expected->second->spec);
    EXPECT_EQ(AsString(entry.data), expected->second->bytes);
    ++expected;
  }
  EXPECT_TRUE(parsed->metadata().empty());

  // The data buffer holds the tensors back to back in the given order.
  const size_t data_start = 8 + HeaderLength(*file);
  std::string concatenated;
  for (const OwnedTensor& t : tensors) concatenated += t.bytes;
  EXPECT_EQ(file->substr(data_start), concatenated);

  const SafetensorsEntry& empty = parsed->tensors()[by_name.size() - 2];
  EXPECT_EQ(empty.spec.name, "y.empty");
  EXPECT_EQ(empty.data.size(), 0u);
  const SafetensorsEntry& scalar = parsed->tensors().back();
  EXPECT_EQ(scalar.spec.name, "z.scalar");
  EXPECT_TRUE(scalar.spec.shape.empty());
  EXPECT_EQ(scalar.data.size(), 8u);
}

TEST(SafetensorsTest, ViewsMatchTensors) {
  const std::vector<OwnedTensor> tensors = EveryDTypeTensors();
  absl::StatusOr<std::string> file = SerializeSafetensors(ViewsOf(tensors), {});
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<SafetensorsFile> parsed = SafetensorsFile::Parse(*file, "v");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const std::vector<ConstHostTensor> views = parsed->Views();
  ASSERT_EQ(views.size(), parsed->tensors().size());
  for (size_t i = 0; i < views.size(); ++i) {
    EXPECT_EQ(views[i].spec, parsed->tensors()[i].spec);
    EXPECT_EQ(views[i].data, parsed->tensors()[i].data.data());
  }
}

TEST(SafetensorsTest, ReserializingSortedViewsReproducesTheFile) {
  std::vector<OwnedTensor> tensors = {
      MakeTensor("a", DType::kI32, {2, 2}, 1),
      MakeTensor("b", DType::kBF16, {3}, 2),
      MakeTensor("c", DType::kU8, {0}, 3),
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  absl::StatusOr<std::string> file =
      SerializeSafetensors(ViewsOf(tensors), metadata);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<SafetensorsFile> parsed = SafetensorsFile::Parse(*file, "r");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<std::string> again =
      SerializeSafetensors(parsed->Views(), parsed->metadata());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *file);
}

TEST(SafetensorsTest, RoundTripsMetadata) {
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"empty", ""},
      {"quote\"and\\slash", "line\nbreak\ttab"},
      {"unicode \xc3\xa9\xe2\x82\xac", "\xf0\x9f\x98\x80"},
      {"fedgather.rank.0", "spiffe://site-a/trainer"},
  };
  OwnedTensor t = MakeTensor("w", DType::kF16, {2}, 5);
  absl::StatusOr<std::string> file =
      SerializeSafetensors(ViewsOf({t}), metadata);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<SafetensorsFile> parsed = SafetensorsFile::Parse(*file, "m");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->metadata(), metadata);
  ASSERT_EQ(parsed->tensors().size(), 1u);
  EXPECT_EQ(AsString(parsed->tensors()[0].data), t.bytes);
}

TEST(SafetensorsTest, WritesTheExactLayout) {
  const std::string b_bytes = "\x01\x02";
  const std::string a_bytes = "\x02\x01";
  const std::vector<ConstHostTensor> tensors = {
      {{"b", DType::kU8, {2}}, b_bytes.data()},
      {{"a", DType::kI16, {1}}, a_bytes.data()},
  };
  absl::StatusOr<std::string> file =
      SerializeSafetensors(tensors, {{"k", "v"}});
  ASSERT_TRUE(file.ok()) << file.status();
  std::string json = R"({"__metadata__":{"k":"v"},)"
                     R"("b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                     R"("a":{"dtype":"I16","shape":[1],"data_offsets":[2,4]}})";
  json.append((8 - json.size() % 8) % 8, ' ');
  EXPECT_EQ(*file, MakeFile(json, "\x01\x02\x02\x01"));
}

TEST(SafetensorsTest, SerializesZeroTensors) {
  absl::StatusOr<std::string> file = SerializeSafetensors({}, {});
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*file, MakeFile("{}      ", ""));
  absl::StatusOr<SafetensorsFile> parsed = SafetensorsFile::Parse(*file, "z");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->tensors().empty());
  EXPECT_TRUE(parsed->metadata().empty());
  EXPECT_TRUE(parsed->Views().empty());
}

TEST(SafetensorsTest, PadsHeaderWithSpacesToAMultipleOf8) {
  for (size_t name_length = 1; name_length <= 17; ++name_length) {
    SCOPED_TRACE(name_length);
    const std::string data = "\x2a";
    const ConstHostTensor tensor = {
        {std::string(name_length, 'n'), DType::kU8, {1}}, data.data()};
    absl::StatusOr<std::string> file = SerializeSafetensors({tensor}, {});
    ASSERT_TRUE(file.ok()) << file.status();
    const uint64_t n = HeaderLength(*file);
    EXPECT_EQ(n % 8, 0u);
    ASSERT_EQ(file->size(), 8 + n + 1);
    const std::string header = file->substr(8, n);
    const size_t close = header.find_last_not_of(' ');
    ASSERT_NE(close, std::string::npos);
    EXPECT_EQ(header[close], '}');
    EXPECT_LT(n - (close + 1), 8u);  // Padding is minimal.
    EXPECT_EQ(file->back(), '\x2a');
  }
}

TEST(SafetensorsTest, ParsesAHandBuiltReferenceFile) {
  // Key order, whitespace and the absence of padding vary as other writers
  // produce them.
  const std::string header =
      R"({"weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},)"
      R"( "__metadata__": {"format": "pt"},)"
      R"( "bias": {"data_offsets": [16, 24], "shape": [2], "dtype": "F32"},)"
      R"( "mask": {"shape": [3], "dtype": "BOOL", "data_offsets": [24, 27]},)"
      R"( "none": {"dtype": "I64", "shape": [0, 5], "data_offsets": [27, 27]}})";
  const float weight[4] = {1.0f, -2.5f, 3.25f, 0.0f};
  const float bias[2] = {0.5f, -0.125f};
  std::string data(reinterpret_cast<const char*>(weight), sizeof(weight));
  data.append(reinterpret_cast<const char*>(bias), sizeof(bias));
  data.append("\x01\x00\x01", 3);
  absl::StatusOr<SafetensorsFile> parsed =
      SafetensorsFile::Parse(MakeFile(header, data), "reference");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->tensors().size(), 4u);
  const auto& t = parsed->tensors();
  EXPECT_EQ(t[0].spec, (TensorSpec{"bias", DType::kF32, {2}}));
  EXPECT_EQ(t[1].spec, (TensorSpec{"mask", DType::kBool, {3}}));
  EXPECT_EQ(t[2].spec, (TensorSpec{"none", DType::kI64, {0, 5}}));
  EXPECT_EQ(t[3].spec, (TensorSpec{"weight", DType::kF32, {2, 2}}));
  float got_bias[2];
  ASSERT_EQ(t[0].data.size(), sizeof(got_bias));
  std::memcpy(got_bias, t[0].data.data(), sizeof(got_bias));
  EXPECT_EQ(got_bias[0], 0.5f);
  EXPECT_EQ(got_bias[1], -0.125f);
  EXPECT_EQ(AsString(t[1].data), std::string("\x01\x00\x01", 3));
  EXPECT_EQ(t[2].data.size(), 0u);
  float got_weight[4];
  ASSERT_EQ(t[3].data.size(), sizeof(got_weight));
  std::memcpy(got_weight, t[3].data.data(), sizeof(got_weight));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got_weight[i], weight[i]);
  EXPECT_EQ(parsed->metadata(),
            (std::map<std::string, std::string>{{"format", "pt"}}));
}

TEST(SafetensorsTest, MovingKeepsViewsValid) {
  OwnedTensor t = MakeTensor("w", DType::kI8, {3}, 9);
  absl::StatusOr<std::string> file = SerializeSafetensors(ViewsOf({t}), {});
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<SafetensorsFile> parsed = SafetensorsFile::Parse(*file, "mv");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const uint8_t* before = parsed->tensors()[0].data.data();
  SafetensorsFile moved = std::move(*parsed);
  SafetensorsFile moved_again = std::move(moved);
  ASSERT_EQ(moved_again.tensors().size(), 1u);
  EXPECT_EQ(moved_again.tensors()[0].data.data(), before);
  EXPECT_EQ(AsString(moved_again.tensors()[0].data), t.bytes);
  EXPECT_EQ(moved_again.Views()[0].data, before);
}

// Entry builds one tensor entry of a hand-written header.
std::string Entry(absl::string_view name, absl::string_view dtype,
                  absl::string_view shape, absl::string_view offsets) {
  return absl::StrCat("\"", name, "\":{\"dtype\":\"", dtype,
                      "\",\"shape\":", shape, ",\"data_offsets\":", offsets,
                      "}");
}

struct MalformedCase {
  std::string label;
  std::string file;
  std::vector<std::string> message_parts;
};

// Printed by its label: gtest (and so ctest's test names) would otherwise
// print the whole struct as bytes.
void PrintTo(const MalformedCase& c, std::ostream* os) { *os << c.label; }

std::vector<MalformedCase> MalformedCases() {
  const std::string ok_w = Entry("w", "U8", "[4]", "[0,4]");
  const std::string four = "abcd";
  std::string rank33 = "[1";
  for (int i = 1; i < 33; ++i) rank33 += ",1";
  rank33 += "]";
  std::vector<MalformedCase> cases = {
      {"Empty", "", {"0 bytes", "shorter than the 8-byte"}},
      {"ShorterThanPrefix",
       std::string("\x02\x00\x00", 3),
       {"3 bytes", "shorter"}},
      {"HeaderLongerThanFile", Le64(100) + "{}", {"header length 100"}},
      {"HeaderLengthHuge", Le64(~uint64_t{0}) + "{}", {"exceeds the limit"}},
      {"HeaderAboveCap",
       Le64(kMaxSafetensorsHeaderBytes + 1) + "{}",
       {"exceeds the limit", "104857600"}},
      {"NotJson", MakeFile("{not json", ""), {"not valid JSON"}},
      {"EmptyHeader", MakeFile("", ""), {"not valid JSON"}},
      {"TrailingJunkInHeader", MakeFile("{} x", ""), {"not valid JSON"}},
      {"NulPadding",
       MakeFile(std::string("{}\0\0", 4), ""),
       {"NUL byte at offset 2"}},
      {"NulThenJunk",
       MakeFile(absl::StrCat("{", ok_w, "}", std::string(1, '\0'), "junk"),
                four),
       {"NUL byte"}},
      {"CommentInHeader", MakeFile("{/*c*/}", ""), {"not valid JSON"}},
      {"InvalidUtf8Name",
       MakeFile(absl::StrCat("{", Entry("\xff", "U8", "[4]", "[0,4]"), "}"),
                four),
       {"not valid JSON"}},
      {"HeaderIsArray", MakeFile("[1,2]", ""), {"must be a JSON object"}},
      {"HeaderIsString", MakeFile("\"x\"", ""), {"must be a JSON object"}},
      {"DuplicateTensorName",
       MakeFile(
           absl::StrCat("{", ok_w, ",", Entry("w", "U8", "[4]", "[4,8]"), "}"),
           "abcdefgh"),
       {"duplicate tensor name 'w'"}},
      {"DuplicateKeyInEntry",
       MakeFile(R"({"w":{"dtype":"U8","dtype":"U8","shape":[4],)"
                R"("data_offsets":[0,4]}})",
                four),
       {"duplicate key 'dtype'", "'w'"}},
      {"DuplicateMetadata",
       MakeFile(
           absl::StrCat(R"({"__metadata__":{},"__metadata__":{},)", ok_w, "}"),
           four),
       {"duplicate key '__metadata__'"}},
      {"DuplicateMetadataKey",
       MakeFile(
           absl::StrCat(R"({"__metadata__":{"k":"1","k":"2"},)", ok_w, "}"),
           four),
       {"duplicate key 'k'", "__metadata__"}},
      {"EntryNotObject",
       MakeFile(R"({"w":[0,4]})", four),
       {"tensor 'w'", "entry must be an object"}},
      {"MissingDtype",
       MakeFile(R"({"w":{"shape":[4],"data_offsets":[0,4]}})", four),
       {"tensor 'w'", "missing dtype"}},
      {"MissingShape",
       MakeFile(R"({"w":{"dtype":"U8","data_offsets":[0,4]}})", four),
       {"tensor 'w'", "missing shape"}},
      {"MissingDataOffsets",
       MakeFile(R"({"w":{"dtype":"U8","shape":[4]}})", four),
       {"tensor 'w'", "missing data_offsets"}},
      {"UnknownKey",
       MakeFile(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4],)"
                R"("extra":1}})",
                four),
       {"tensor 'w'", "unknown key 'extra'"}},
      {"DtypeNotString",
       MakeFile(R"({"w":{"dtype":1,"shape":[4],"data_offsets":[0,4]}})", four),
       {"tensor 'w'", "dtype must be a string"}},
      {"UnsupportedDtype",
       MakeFile(absl::StrCat("{", Entry("w", "F8_E4M3", "[4]", "[0,4]"), "}"),
                four),
       {"tensor 'w'", "unsupported dtype", "F8_E4M3"}},
      {"LowercaseDtype",
       MakeFile(absl::StrCat("{", Entry("w", "u8", "[4]", "[0,4]"), "}"), four),
       {"tensor 'w'", "unsupported dtype"}},
      {"ShapeNotArray",
       MakeFile(absl::StrCat("{", Entry("w", "U8", "4", "[0,4]"), "}"), four),
       {"tensor 'w'", "shape must be an array"}},
      {"ShapeFloat",
       MakeFile(absl::StrCat("{", Entry("w", "U8", "[4.0]", "[0,4]"), "}"),
                four),
       {"tensor 'w'", "must be integers"}},
      {"ShapeString",
       MakeFile(absl::StrCat("{", Entry("w", "U8", "[\"4\"]", "[0,4]"), "}"),
                four),
       {"tensor 'w'", "must be integers"}},
      {"ShapeBool",
       MakeFile(absl::StrCat("{", Entry("w", "U8", "[true]", "[0,4]"), "}"),
                four),
       {"tensor 'w'", "must be integers"}},
      {"ShapeNested",
       MakeFile(absl::StrCat("{", Entry("w", "U8", "[[4]]", "[0,4]"), "}"),
                four),
       {"nests deeper", "'w'"}},
      {"NegativeDim",
       MakeFile(absl::StrCat("{", Entry("w", "U8", "[-1, 4]", "[0,4]"), "}"),
                four),
       {"tensor 'w'", "negative shape dimension -1"}},
      {"DimAboveInt64",
       MakeFile(
           absl::StrCat(
               "{", Entry("w", "U8", "[18446744073709551615]", "[0,4]"), "}"),
           four),
       {"tensor 'w'", "does not fit in int64"}},
      {"ElementCountOverflows",
       MakeFile(
           absl::StrCat(
               "{", Entry("w", "U8", "[9223372036854775807, 2]", "[0,4]"), "}"),
           four),
       {"tensor 'w'", "overflows int64"}},
      {"ByteSizeOverflows",
       MakeFile(
           absl::StrCat(
               "{", Entry("w", "F64", "[4611686018427387904]", "[0,4]"), "}"),
           four),
       {"tensor 'w'", "too large"}},
      {"RankAboveLimit",
       MakeFile(absl::StrCat("{", Entry("w", "U8", rank33, "[0,1]"), "}"), "a"),
       {"tensor 'w'", "rank 33"}},
      {"OffsetsOneValue",
       MakeFile(absl::StrCat("{", Entry("w", "U8", "[4]", "[0]"), "}"), four),
       {"tensor 'w'", "data_offsets must be two unsigned integers"}},
      {"OffsetsThreeValues",
       MakeFile(absl::StrCat("{", Entry("w", "U8", "[4]", "[0,4,4]"), "}"),
                four),
       {"tensor 'w'", "data_offsets must be two"}},
      {"OffsetsNotArray",
       MakeFile(absl::StrCat("{", Entry("w", "U8", "[4]", "{}"), "}"), four),
       {"tensor 'w'", "data_offsets must be two"}},
      {"OffsetsNegative",
       MakeFile(absl::StrCat("{", Entry("w", "U8", "[4]", "[-1,3]"), "}"),
                four),
       {"tensor 'w'", "data_offsets must be two unsigned"}},
      {"OffsetsFloat",
       MakeFile(absl::StrCat("{", Entry("w", "U8", "[4]", "[0.0,4.0]"), "}"),
                four),
       {"tensor 'w'", "data_offsets must be two unsigned"}},
      {"OffsetsString",
       MakeFile(
           absl::StrCat("{", Entry("w", "U8", "[4]", "[\"0\",\"4\"]"), "}"),
           four),
       {"tensor 'w'", "data_offsets must be two unsigned"}},
      {"OffsetsAboveUint64",
       MakeFile(
           absl::StrCat(
               "{", Entry("w", "U8", "[4]", "[0,18446744073709551616]"), "}"),
           four),
       {"tensor 'w'", "data_offsets must be two unsigned"}},
      {"BeginAfterEnd",
       MakeFile(absl::StrCat("{", Entry("w", "U8", "[4]", "[4,0]"), "}"), four),
       {"tensor 'w'", "begin 4 is after end 0"}},
      {"EndBeyondBuffer",
       MakeFile(absl::StrCat("{", Entry("w", "U8", "[8]", "[0,8]"), "}"), four),
       {"tensor 'w'", "end 8 is beyond the data buffer of 4 bytes"}},
      {"EndFarBeyondBuffer",
       MakeFile(absl::StrCat("{",
                             Entry("w", "U8", "[4]",
                                   "[18446744073709551611,"
                                   "18446744073709551615]"),
                             "}"),
                four),
       {"tensor 'w'", "beyond the data buffer"}},
      {"SizeMismatch",
       MakeFile(absl::StrCat("{", Entry("w", "U8", "[3]", "[0,4]"), "}"), four),
       {"tensor 'w'", "span 4 bytes", "needs 3"}},
      {"SizeMismatchDtype",
       MakeFile(absl::StrCat("{", Entry("w", "F32", "[4]", "[0,4]"), "}"),
                four),
       {"tensor 'w'", "needs 16"}},
      {"Overlap",
       MakeFile(absl::StrCat("{", Entry("a", "U8", "[4]", "[0,4]"), ",",
                             Entry("b", "U8", "[4]", "[2,6]"), "}"),
                "abcdef"),
       {"tensor 'b'", "overlap tensor 'a'"}},
      {"SameRange",
       MakeFile(absl::StrCat("{", Entry("a", "U8", "[4]", "[0,4]"), ",",
                             Entry("b", "U8", "[4]", "[0,4]"), "}"),
                four),
       {"tensor 'b'", "overlap tensor 'a'"}},
      {"EmptyTensorInsideAnother",
       MakeFile(absl::StrCat("{", Entry("a", "U8", "[4]", "[0,4]"), ",",
                             Entry("z", "U8", "[0]", "[2,2]"), "}"),
                four),
       {"tensor 'z'", "overlap tensor 'a'"}},
      {"Gap",
       MakeFile(absl::StrCat("{", Entry("a", "U8", "[2]", "[0,2]"), ",",
                             Entry("b", "U8", "[2]", "[4,6]"), "}"),
                "abcdef"),
       {"tensor 'b'", "gap", "ends at 2"}},
      {"GapAtStart",
       MakeFile(absl::StrCat("{", Entry("a", "U8", "[2]", "[2,4]"), "}"), four),
       {"tensor 'a'", "gap"}},
      {"TrailingBytes",
       MakeFile(absl::StrCat("{", Entry("a", "U8", "[2]", "[0,2]"), "}"),
                "abc"),
       {"1 trailing bytes"}},
      {"ZeroTensorsWithData", MakeFile("{}", "x"), {"1 trailing bytes"}},
      {"MetadataNotObject",
       MakeFile(absl::StrCat(R"({"__metadata__":["a"],)", ok_w, "}"), four),
       {"__metadata__ must be an object"}},
      {"MetadataValueNotString",
       MakeFile(absl::StrCat(R"({"__metadata__":{"k":1},)", ok_w, "}"), four),
       {"__metadata__ value of 'k' must be a string"}},
      {"MetadataValueObject",
       MakeFile(absl::StrCat(R"({"__metadata__":{"k":{}},)", ok_w, "}"), four),
       {"__metadata__ value of 'k' must be a string, got object"}},
      {"MetadataValueNested",
       MakeFile(absl::StrCat(R"({"__metadata__":{"k":[[1]]},)", ok_w, "}"),
                four),
       {"nests deeper"}},
      {"DeeplyNestedHeader",
       MakeFile(std::string(100000, '[') + std::string(100000, ']'), ""),
       {"nests deeper"}},
      {"EmptyTensorName",
       MakeFile(absl::StrCat("{", Entry("", "U8", "[4]", "[0,4]"), "}"), four),
       {"empty tensor name"}},
      {"TensorNameTooLong",
       MakeFile(absl::StrCat("{",
                             Entry(std::string(kMaxTensorNameBytes + 1, 'n'),
                                   "U8", "[4]", "[0,4]"),
                             "}"),
                four),
       {"tensor name of 1025 bytes"}},
  };
  return cases;
}

class MalformedTest : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(MalformedTest, IsInvalidArgumentNamingTheProblem) {
  const MalformedCase& c = GetParam();
  absl::StatusOr<SafetensorsFile> parsed =
      SafetensorsFile::Parse(c.file, kSource);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument)
      << parsed.status();
  const std::string message(parsed.status().message());
  EXPECT_THAT(message, StartsWith(absl::StrCat(kSource, ": ")));
  for (const std::string& part : c.message_parts) {
    EXPECT_THAT(message, HasSubstr(part));
  }
}

INSTANTIATE_TEST_SUITE_P(
    SafetensorsTest, MalformedTest, ::testing::ValuesIn(MalformedCases()),
    [](const ::testing::TestParamInfo<MalformedCase>& info) {
      return info.param.label;
    });

TEST(SafetensorsTest, AcceptsEmptyTensorsAtRangeBoundaries) {
  // Zero-byte tensors may sit at 0, between two tensors, and at the end.
  const std::string header =
      absl::StrCat("{", Entry("a", "U8", "[0]", "[0,0]"), ",",
                   Entry("b", "U8", "[2]", "[0,2]"), ",",
                   Entry("c", "F32", "[3,0]", "[2,2]"), ",",
                   Entry("d", "U8", "[1]", "[2,3]"), ",",
                   Entry("e", "BOOL", "[0]", "[3,3]"), "}");
  absl::StatusOr<SafetensorsFile> parsed =
      SafetensorsFile::Parse(MakeFile(header, "xyz"), "edges");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->tensors().size(), 5u);
  EXPECT_EQ(AsString(parsed->tensors()[1].data), "xy");
  EXPECT_EQ(AsString(parsed->tensors()[3].data), "z");
  EXPECT_EQ(parsed->tensors()[4].data.size(), 0u);
}

std::string SmallValidFile() {
  std::vector<OwnedTensor> tensors = {
      MakeTensor("bias", DType::kF32, {3}, 1),
      MakeTensor("weight", DType::kBF16, {2, 2}, 2),
  };
  return SerializeSafetensors(ViewsOf(tensors), {{"format", "pt"}}).value();
}

TEST(SafetensorsTest, EveryTruncationFailsCleanly) {
  const std::string file = SmallValidFile();
  ASSERT_TRUE(SafetensorsFile::Parse(file, "full").ok());
  for (size_t length = 0; length < file.size(); ++length) {
    SCOPED_TRACE(length);
    absl::StatusOr<SafetensorsFile> parsed =
        SafetensorsFile::Parse(file.substr(0, length), kSource);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(parsed.status().message()),
                StartsWith(absl::StrCat(kSource, ": ")));
  }
  absl::StatusOr<SafetensorsFile> longer =
      SafetensorsFile::Parse(file + "x", kSource);
  ASSERT_FALSE(longer.ok());
  EXPECT_THAT(std::string(longer.status().message()),
              HasSubstr("1 trailing bytes"));
}

TEST(SafetensorsTest, SingleByteCorruptionsNeverBreakInvariants) {
  const std::string file = SmallValidFile();
  const size_t header_end = 8 + HeaderLength(file);
  for (size_t pos = 0; pos < header_end; ++pos) {
    for (const char value : {'\0', '\x7f', '\xff', '0', '9', '"', '-', ' '}) {
      std::string corrupt = file;
      corrupt[pos] = value;
      absl::StatusOr<SafetensorsFile> parsed =
          SafetensorsFile::Parse(corrupt, kSource);
      if (!parsed.ok()) {
        EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
        continue;
      }
      // Whatever still parses describes the data buffer exactly.
      uint64_t covered = 0;
      for (const SafetensorsEntry& entry : parsed->tensors()) {
        EXPECT_EQ(static_cast<int64_t>(entry.data.size()),
                  ByteSize(entry.spec).value());
        covered += entry.data.size();
      }
      EXPECT_EQ(covered, corrupt.size() - header_end) << "pos " << pos;
    }
  }
}

TEST(SafetensorsTest, SerializeRejectsInvalidTensors) {
  const std::string bytes(16, 'x');
  struct Case {
    std::string label;
    std::vector<ConstHostTensor> tensors;
    std::map<std::string, std::string> metadata;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"duplicate",
       {{{"w", DType::kU8, {2}}, bytes.data()},
        {{"v", DType::kU8, {2}}, bytes.data()},
        {{"w", DType::kU8, {1}}, bytes.data()}},
       {},
       "duplicate tensor name 'w'"},
      {"empty name", {{{"", DType::kU8, {2}}, bytes.data()}}, {}, "empty"},
      {"reserved name",
       {{{"__metadata__", DType::kU8, {2}}, bytes.data()}},
       {},
       "reserved"},
      {"null data", {{{"w", DType::kF32, {2}}, nullptr}}, {}, "no data"},
      {"negative dim",
       {{{"w", DType::kF32, {-2}}, bytes.data()}},
       {},
       "negative"},
      {"name too long",
       {{{std::string(kMaxTensorNameBytes + 1, 'n'), DType::kU8, {1}},
         bytes.data()}},
       {},
       "exceeds the limit"},
      {"name not utf8",
       {{{"\xc3", DType::kU8, {1}}, bytes.data()}},
       {},
       "UTF-8"},
      {"metadata not utf8",
       {{{"w", DType::kU8, {1}}, bytes.data()}},
       {{"k", "\xff"}},
       "UTF-8"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    absl::StatusOr<std::string> file =
        SerializeSafetensors(c.tensors, c.metadata);
    ASSERT_FALSE(file.ok());
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(file.status().message()),
                HasSubstr(c.message_part));
  }
}

TEST(SafetensorsTest, SerializeAcceptsNullDataForEmptyTensors) {
  const std::vector<ConstHostTensor> tensors = {
      {{"e", DType::kF32, {0, 3}}, nullptr}};
  absl::StatusOr<std::string> file = SerializeSafetensors(tensors, {});
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<SafetensorsFile> parsed = SafetensorsFile::Parse(*file, "e");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->tensors().size(), 1u);
  EXPECT_EQ(parsed->tensors()[0].spec, tensors[0].spec);
}

// A fresh directory under the test temp dir, removed with its contents.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = ::testing::TempDir() + "/safetensors_test.XXXXXX";
    char* made = ::mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr) << "mkdtemp " << pattern;
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadRaw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

// FilesIn lists the names in `dir`, sorted; temporary files would show here.
std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(SafetensorsFileIoTest, WriteThenReadFileRoundTrips) {
  ScratchDir dir;
  const std::string path = dir.path() + "/model.safetensors";
  const std::vector<OwnedTensor> tensors = EveryDTypeTensors();
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                       {"site", "a"}};
  ASSERT_TRUE(WriteSafetensorsFile(path, ViewsOf(tensors), metadata).ok());
  EXPECT_EQ(FilesIn(dir.path()), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(ReadRaw(path),
            SerializeSafetensors(ViewsOf(tensors), metadata).value());

  absl::StatusOr<SafetensorsFile> read = SafetensorsFile::ReadFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->metadata(), metadata);
  std::map<std::string, const OwnedTensor*> by_name;
  for (const OwnedTensor& t : tensors) by_name[t.spec.name] = &t;
  ASSERT_EQ(read->tensors().size(), by_name.size());
  auto expected = by_name.begin();
  for (const SafetensorsEntry& entry : read->tensors()) {
    EXPECT_EQ(entry.spec, expected->second->spec);
    EXPECT_EQ(AsString(entry.data), expected->second->bytes);
    ++expected;
  }
}

TEST(SafetensorsFileIoTest, WriteReplacesAnExistingFile) {
  ScratchDir dir;
  const std::string path = dir.path() + "/model.safetensors";
  {
    std::ofstream out(path, std::ios::binary);
    out << "old contents that are much longer than the new file will be....";
  }
  OwnedTensor t = MakeTensor("w", DType::kU8, {2}, 4);
  ASSERT_TRUE(WriteSafetensorsFile(path, ViewsOf({t}), {}).ok());
  EXPECT_EQ(ReadRaw(path), SerializeSafetensors(ViewsOf({t}), {}).value());
  EXPECT_EQ(FilesIn(dir.path()), std::vector<std::string>{"model.safetensors"});
}

TEST(SafetensorsFileIoTest, WriteRejectsDuplicateNamesWithoutWriting) {
  ScratchDir dir;
  const std::string path = dir.path() + "/dup.safetensors";
  const std::string bytes = "ab";
  const std::vector<ConstHostTensor> tensors = {
      {{"x", DType::kU8, {2}}, bytes.data()},
      {{"x", DType::kU8, {2}}, bytes.data()}};
  absl::Status status = WriteSafetensorsFile(path, tensors, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(path));
  EXPECT_THAT(std::string(status.message()), HasSubstr("'x'"));
  EXPECT_TRUE(FilesIn(dir.path()).empty());
}

TEST(SafetensorsFileIoTest, WriteIntoMissingDirectoryIsNotFound) {
  ScratchDir dir;
  const std::string path = dir.path() + "/no/such/dir/model.safetensors";
  absl::Status status = WriteSafetensorsFile(path, {}, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(path));
}

TEST(SafetensorsFileIoTest, ReadFileMissingPathIsNotFound) {
  ScratchDir dir;
  const std::string path = dir.path() + "/missing.safetensors";
  absl::StatusOr<SafetensorsFile> read = SafetensorsFile::ReadFile(path);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound) << read.status();
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(path));
}

TEST(SafetensorsFileIoTest, ReadFileOfDirectoryIsInvalidArgument) {
  ScratchDir dir;
  absl::StatusOr<SafetensorsFile> read = SafetensorsFile::ReadFile(dir.path());
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(dir.path()));
}

TEST(SafetensorsFileIoTest, ReadFileNamesThePathInParseErrors) {
  ScratchDir dir;
  const std::string path = dir.path() + "/garbage.safetensors";
  {
    std::ofstream out(path, std::ios::binary);
    out << MakeFile("{\"w\":1}", "");
  }
  absl::StatusOr<SafetensorsFile> read = SafetensorsFile::ReadFile(path);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(read.status().message()),
              StartsWith(absl::StrCat(path, ": tensor 'w'")));
}

}  // namespace
}  // namespace fedgather
