#include "examples/fedavg_digits/digits_data.h"

#include <zlib.h>

#include <cstring>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/file_io.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace fedgather::fedavg {
namespace {

constexpr int kMaxPixel = 16;

// Gunzip inflates a whole gzip stream; INVALID_ARGUMENT naming `path` when
// it is corrupt or truncated.
absl::StatusOr<std::string> Gunzip(const std::string& compressed,
                                   const std::string& path) {
  z_stream stream;
  std::memset(&stream, 0, sizeof stream);
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) {
    return absl::InternalError("zlib: inflateInit2 failed");
  }
  stream.next_in =
      reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  stream.avail_in = static_cast<uInt>(compressed.size());
  std::string out;
  char buffer[1 << 16];
  int rc = Z_OK;
  while (rc == Z_OK) {
    stream.next_out = reinterpret_cast<Bytef*>(buffer);
    stream.avail_out = sizeof buffer;
    rc = inflate(&stream, Z_NO_FLUSH);
    out.append(buffer, sizeof buffer - stream.avail_out);
    if (rc == Z_BUF_ERROR && stream.avail_in == 0) break;  // truncated
  }
  inflateEnd(&stream);
  if (rc != Z_STREAM_END) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a complete gzip stream (zlib error ", rc,
        stream.msg != nullptr ? absl::StrCat(": ", stream.msg) : std::string(),
        ")"));
  }
  return out;
}

// Shuffle is a Fisher-Yates shuffle on `rng` (std::shuffle's algorithm is
// not fixed by the standard, so a split through it could differ between
// standard libraries).
void Shuffle(std::vector<int64_t>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    std::swap(v[i - 1], v[rng() % i]);
  }
}

// Uniform01 returns a double in [0, 1) from the top 53 bits of rng().
double Uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

void Append(const Dataset& from, int64_t index, Dataset* to) {
  const float* row = from.pixels.data() + index * kPixels;
  to->pixels.insert(to->pixels.end(), row, row + kPixels);
  to->labels.push_back(from.labels[index]);
}

}  // namespace

std::array<int64_t, kClasses> Dataset::ClassCounts() const {
  std::array<int64_t, kClasses> counts{};
  for (int64_t label : labels) ++counts[label];
  return counts;
}

std::string Dataset::Fingerprint() const {
  Sha256 sha;
  sha.Update(labels.data(), labels.size() * sizeof(int64_t));
  sha.Update(pixels.data(), pixels.size() * sizeof(float));
  return DigestToHex(sha.Finish()).substr(0, 16);
}

absl::StatusOr<Dataset> LoadDigits(const std::string& path) {
  FG_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  if (text.size() >= 2 && static_cast<uint8_t>(text[0]) == 0x1f &&
      static_cast<uint8_t>(text[1]) == 0x8b) {
    FG_ASSIGN_OR_RETURN(text, Gunzip(text, path));
  }
  Dataset data;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::vector<absl::string_view> fields = absl::StrSplit(line, ',');
    if (fields.size() != kPixels + 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_number, ": ", fields.size(),
                       " fields, want ", kPixels + 1, " (64 pixels, label)"));
    }
    for (int i = 0; i <= kPixels; ++i) {
      int value = -1;
      const int max = i < kPixels ? kMaxPixel : kClasses - 1;
      if (!absl::SimpleAtoi(fields[i], &value) || value < 0 || value > max) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", line_number, ": field ", i + 1, " is '",
                         fields[i], "', want an integer in 0..", max));
      }
      if (i < kPixels) {
        data.pixels.push_back(static_cast<float>(value) / kMaxPixel);
      } else {
        data.labels.push_back(value);
      }
    }
  }
  if (data.size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no examples"));
  }
  return data;
}

int HomeSite(int label, int sites) { return label * sites / kClasses; }

absl::StatusOr<Split> SplitNonIid(const Dataset& all,
                                  const SplitOptions& options) {
  if (options.sites < 1 || options.sites > kClasses) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sites is ", options.sites, "; the split needs 1..", kClasses));
  }
  for (double fraction : {options.test_fraction, options.home_fraction}) {
    if (!(fraction >= 0 && fraction <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("split fraction ", fraction, " is not in [0, 1]"));
    }
  }
  std::mt19937_64 rng(options.seed);
  Split split;
  split.sites.resize(options.sites);
  for (int label = 0; label < kClasses; ++label) {
    std::vector<int64_t> indices;
    for (int64_t i = 0; i < all.size(); ++i) {
      if (all.labels[i] == label) indices.push_back(i);
    }
    Shuffle(indices, rng);
    const auto test_count = static_cast<size_t>(
        static_cast<double>(indices.size()) * options.test_fraction + 0.5);
    for (size_t k = 0; k < indices.size(); ++k) {
      if (k < test_count) {
        Append(all, indices[k], &split.test);
        continue;
      }
      int site = HomeSite(label, options.sites);
      if (Uniform01(rng) >= options.home_fraction) {
        site = static_cast<int>(rng() % options.sites);
      }
      Append(all, indices[k], &split.sites[site]);
    }
  }
  return split;
}

}  // namespace fedgather::fedavg
