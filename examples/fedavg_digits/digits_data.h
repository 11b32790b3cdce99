// DigitsData: the UCI optical-recognition handwritten digits (8x8 images,
// pixel values 0..16, labels 0..9), loaded from the CSV that
// examples/fedavg_digits/data/ ships, and their deterministic non-IID split
// across the sites of a federation. No LibTorch here.
#ifndef FEDGATHER_EXAMPLES_FEDAVG_DIGITS_DIGITS_DATA_H_
#define FEDGATHER_EXAMPLES_FEDAVG_DIGITS_DIGITS_DATA_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fedgather::fedavg {

inline constexpr int kPixels = 64;  // 8x8
inline constexpr int kClasses = 10;

// Dataset holds examples row-major: example i is pixels[i * kPixels, ...)
// with label labels[i].
struct Dataset {
  std::vector<float> pixels;  // scaled to [0, 1] (value / 16)
  std::vector<int64_t> labels;

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  // ClassCounts returns how many examples of each label there are.
  std::array<int64_t, kClasses> ClassCounts() const;
  // Fingerprint returns the first 16 hex digits of the SHA-256 of the
  // labels and pixels, so that sites can check they hold the same test set.
  std::string Fingerprint() const;
};

// LoadDigits reads a CSV, gzip-compressed or plain, of one example per line:
// 64 integer pixel values in 0..16, then the label in 0..9. Blocks on file
// I/O. NOT_FOUND (or the errno's code) when the file cannot be opened;
// INVALID_ARGUMENT naming the line and field when a line is malformed or
// the file holds no example.
absl::StatusOr<Dataset> LoadDigits(const std::string& path);

struct SplitOptions {
  int sites = 4;  // 1..kClasses
  // Of each class, this fraction (rounded) is held out as the test set.
  double test_fraction = 0.2;
  // Of each class's training examples, about this fraction goes to the
  // class's home site (HomeSite); each of the others goes to a site drawn
  // uniformly from all of them.
  double home_fraction = 0.9;
  uint64_t seed = 1;  // the split is a function of the data and this seed
};

struct Split {
  Dataset test;
  std::vector<Dataset> sites;  // sites[s]: site s's training examples
};

// HomeSite returns the site whose home class `label` is: the classes are
// cut into `sites` contiguous runs, floor(label * sites / kClasses). With 4
// sites: {0,1,2}, {3,4}, {5,6,7}, {8,9}.
int HomeSite(int label, int sites);

// SplitNonIid splits `all` into a stratified test set and one training set
// per site, where site s holds mostly its home classes. Deterministic: the
// same data and options give the same split on every machine (it uses
// std::mt19937_64, whose output the standard fixes). INVALID_ARGUMENT for
// sites outside 1..kClasses or fractions outside [0, 1].
absl::StatusOr<Split> SplitNonIid(const Dataset& all,
                                  const SplitOptions& options);

}  // namespace fedgather::fedavg

#endif  // FEDGATHER_EXAMPLES_FEDAVG_DIGITS_DIGITS_DATA_H_
