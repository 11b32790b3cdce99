// ContentHasher against independent implementations: BLAKE3 (our build of
// the C sources from Debian's librust-blake3-dev) against Debian's b3sum,
// the Rust implementation, and SHA-256 (OpenSSL) against coreutils'
// sha256sum, on inputs of every length class BLAKE3 treats differently:
// empty, inside one 64-byte block, around the 1 KiB chunk boundary, around
// 64 KiB (the SIMD batch sizes) and several MiB (a deep tree). Each input
// is hashed in one Update and again cut at uneven points.
#include "common/content_hasher.h"

#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"

namespace fedgather {
namespace {

std::vector<uint8_t> Pattern(size_t size) {
  std::vector<uint8_t> bytes(size);
  uint32_t x = 0x9e3779b9u ^ static_cast<uint32_t>(size);
  for (uint8_t& b : bytes) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return bytes;
}

// RunTool runs `command` with `input` as its file argument and returns the
// first word of what it prints (the hex digest).
std::string RunTool(const std::string& command,
                    const std::vector<uint8_t>& input) {
  std::string path = ::testing::TempDir() + "content_hasher_test.XXXXXX";
  const int fd = ::mkstemp(path.data());
  EXPECT_GE(fd, 0);
  ::close(fd);
  EXPECT_TRUE(
      WriteStringToFile(path, std::string(input.begin(), input.end())).ok());
  const std::string line = absl::StrCat(command, " ", path);
  FILE* pipe = ::popen(line.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << line;
  std::string out;
  char buffer[256];
  while (pipe != nullptr && ::fgets(buffer, sizeof buffer, pipe) != nullptr) {
    out += buffer;
  }
  const int status = pipe != nullptr ? ::pclose(pipe) : -1;
  ::unlink(path.c_str());
  EXPECT_EQ(status, 0) << line << " failed; is it installed "
                       << "(deploy/install-deps.sh)?";
  return out.substr(0, out.find_first_of(" \n"));
}

const size_t kSizes[] = {
    0,    1,    63,    64,    65,    1023,          1024,
    1025, 2048, 65535, 65536, 65537, (3 << 20) + 7, 8 << 20};

// Hashes `bytes` in pieces of the sizes in `cuts`, cycling.
Digest HashInPieces(DigestAlgorithm algorithm,
                    const std::vector<uint8_t>& bytes,
                    const std::vector<size_t>& cuts) {
  ContentHasher hasher(algorithm);
  size_t at = 0;
  for (size_t i = 0; at < bytes.size(); ++i) {
    const size_t n = std::min(cuts[i % cuts.size()], bytes.size() - at);
    hasher.Update(bytes.data() + at, n);
    at += n;
  }
  return hasher.Finish();
}

void ExpectMatchesTool(DigestAlgorithm algorithm, const std::string& tool) {
  for (const size_t size : kSizes) {
    const std::vector<uint8_t> bytes = Pattern(size);
    const std::string expected = RunTool(tool, bytes);
    ASSERT_EQ(expected.size(), 64u) << tool << " on " << size << " bytes";
    EXPECT_EQ(DigestToHex(HashContent(algorithm, bytes.data(), bytes.size())),
              expected)
        << DigestAlgorithmName(algorithm) << ", " << size << " bytes";
    // Small pieces, then pieces around and past the 16 KiB runs the BLAKE3
    // hasher stages its input into.
    for (const std::vector<size_t>& cuts : std::vector<std::vector<size_t>>{
             {1, 1000, 4097, 7}, {16371, 16384, 40000, 3, 70001}}) {
      EXPECT_EQ(DigestToHex(HashInPieces(algorithm, bytes, cuts)), expected)
          << DigestAlgorithmName(algorithm) << " in pieces of " << cuts[0]
          << ".., " << size << " bytes";
    }
  }
}

TEST(ContentHasherTest, Blake3MatchesDebiansB3sum) {
  ExpectMatchesTool(DigestAlgorithm::kBlake3, "b3sum --no-names");
}

TEST(ContentHasherTest, Sha256MatchesCoreutilsSha256sum) {
  ExpectMatchesTool(DigestAlgorithm::kSha256, "sha256sum");
}

// BLAKE3's published test vector for the empty input, and SHA-256's.
TEST(ContentHasherTest, EmptyInputGivesEachAlgorithmsKnownDigest) {
  EXPECT_EQ(DigestToHex(HashContent(DigestAlgorithm::kBlake3, nullptr, 0)),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262");
  EXPECT_EQ(DigestToHex(HashContent(DigestAlgorithm::kSha256, nullptr, 0)),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(ContentHasherTest, AMovedHasherGoesOn) {
  const std::vector<uint8_t> bytes = Pattern(5000);
  for (DigestAlgorithm algorithm :
       {DigestAlgorithm::kBlake3, DigestAlgorithm::kSha256}) {
    ContentHasher first(algorithm);
    first.Update(bytes.data(), 2000);
    ContentHasher moved = std::move(first);
    moved.Update(bytes.data() + 2000, 3000);
    EXPECT_EQ(moved.algorithm(), algorithm);
    EXPECT_EQ(moved.Finish(), HashContent(algorithm, bytes.data(), 5000));
  }
}

TEST(ContentHasherTest, NamesAndWireValuesRoundTrip) {
  for (DigestAlgorithm algorithm :
       {DigestAlgorithm::kBlake3, DigestAlgorithm::kSha256}) {
    EXPECT_EQ(ParseDigestAlgorithm(DigestAlgorithmName(algorithm)), algorithm);
    EXPECT_EQ(DigestAlgorithmFromProto(DigestAlgorithmToProto(algorithm), "x")
                  .value(),
              algorithm);
  }
  EXPECT_EQ(ParseDigestAlgorithm("BLAKE3"), std::nullopt);
  EXPECT_EQ(ParseDigestAlgorithm("md5"), std::nullopt);
  // Unset is what every digest meant before the field: SHA-256.
  EXPECT_EQ(
      DigestAlgorithmFromProto(v1::DIGEST_ALGORITHM_UNSPECIFIED, "x").value(),
      DigestAlgorithm::kSha256);
  const absl::Status unknown =
      DigestAlgorithmFromProto(static_cast<v1::DigestAlgorithm>(9),
                               "rank 2's header")
          .status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      unknown.message(),
      "rank 2's header names digest algorithm 9, which this fedgather does "
      "not know (1: SHA-256, 2: BLAKE3)");
}

}  // namespace
}  // namespace fedgather
