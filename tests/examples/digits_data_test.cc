#include "examples/fedavg_digits/digits_data.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <utility>

#include "common/file_io.h"

namespace fedgather::fedavg {
namespace {

const Dataset& Digits() {
  static const Dataset* const data = [] {
    absl::StatusOr<Dataset> loaded = LoadDigits(FEDAVG_DIGITS_CSV);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return new Dataset(loaded.ok() ? *std::move(loaded) : Dataset{});
  }();
  return *data;
}

// Rows returns every example as (label, pixels), sorted, to compare
// datasets as multisets.
std::vector<std::pair<int64_t, std::vector<float>>> Rows(
    const std::vector<const Dataset*>& parts) {
  std::vector<std::pair<int64_t, std::vector<float>>> rows;
  for (const Dataset* d : parts) {
    for (int64_t i = 0; i < d->size(); ++i) {
      rows.emplace_back(
          d->labels[i],
          std::vector<float>(d->pixels.begin() + i * kPixels,
                             d->pixels.begin() + (i + 1) * kPixels));
    }
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "digits_data_test_" + name;
}

TEST(DigitsDataTest, LoadsTheShippedFile) {
  const Dataset& data = Digits();
  ASSERT_EQ(data.size(), 1797);  // data/README.md
  ASSERT_EQ(data.pixels.size(), 1797u * kPixels);
  for (float p : data.pixels) {
    ASSERT_GE(p, 0.0f);
    ASSERT_LE(p, 1.0f);
  }
  // The first row of the file: 0,0,5,13,9,1,0,0,... label 0.
  EXPECT_EQ(data.labels[0], 0);
  EXPECT_FLOAT_EQ(data.pixels[2], 5.0f / 16);
  EXPECT_FLOAT_EQ(data.pixels[3], 13.0f / 16);
  for (int64_t count : data.ClassCounts()) EXPECT_GT(count, 170);
}

TEST(DigitsDataTest, ReadsPlainCsvAndNamesBadLines) {
  std::string row;
  for (int i = 0; i < kPixels; ++i) row += std::to_string(i % 17) + ",";
  const std::string path = TempPath("plain.csv");
  ASSERT_TRUE(WriteStringToFile(path, row + "7\r\n" + row + "3\n").ok());
  absl::StatusOr<Dataset> plain = LoadDigits(path);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->labels, (std::vector<int64_t>{7, 3}));
  EXPECT_FLOAT_EQ(plain->pixels[16], 1.0f);

  ASSERT_TRUE(WriteStringToFile(path, row + "7\n" + row + "10\n").ok());
  absl::StatusOr<Dataset> bad_label = LoadDigits(path);
  EXPECT_EQ(bad_label.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_label.status().message().find(":2: field 65"),
            std::string::npos)
      << bad_label.status();

  ASSERT_TRUE(WriteStringToFile(path, "1,2,3\n").ok());
  EXPECT_EQ(LoadDigits(path).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(WriteStringToFile(path, "\n").ok());
  EXPECT_EQ(LoadDigits(path).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A truncated gzip stream.
  ASSERT_TRUE(WriteStringToFile(path, std::string("\x1f\x8b\x08\x00", 4)).ok());
  EXPECT_EQ(LoadDigits(path).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadDigits(TempPath("missing.csv")).status().code(),
            absl::StatusCode::kNotFound);
  std::remove(path.c_str());
}

TEST(DigitsDataTest, SplitIsAPartitionWithAStratifiedTestSet) {
  const Dataset& all = Digits();
  absl::StatusOr<Split> split = SplitNonIid(all, SplitOptions{});
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_EQ(split->sites.size(), 4u);
  std::vector<const Dataset*> parts = {&split->test};
  for (const Dataset& site : split->sites) parts.push_back(&site);
  EXPECT_EQ(Rows(parts), Rows({&all}));  // every example exactly once

  const auto all_counts = all.ClassCounts();
  const auto test_counts = split->test.ClassCounts();
  for (int c = 0; c < kClasses; ++c) {
    EXPECT_EQ(test_counts[c], static_cast<int64_t>(all_counts[c] * 0.2 + 0.5))
        << "class " << c;
  }
}

TEST(DigitsDataTest, EachSiteHoldsMostlyItsTwoOrThreeHomeClasses) {
  absl::StatusOr<Split> split = SplitNonIid(Digits(), SplitOptions{});
  ASSERT_TRUE(split.ok()) << split.status();
  for (int s = 0; s < 4; ++s) {
    const Dataset& site = split->sites[s];
    int64_t home = 0;
    int home_classes = 0;
    std::set<int> present;
    for (int c = 0; c < kClasses; ++c) {
      if (HomeSite(c, 4) == s) {
        home += site.ClassCounts()[c];
        ++home_classes;
      }
      if (site.ClassCounts()[c] > 0) present.insert(c);
    }
    EXPECT_GE(home_classes, 2) << "site " << s;
    EXPECT_LE(home_classes, 3) << "site " << s;
    // home_fraction 0.9 plus its share of the scattered tenth.
    EXPECT_GT(home, site.size() * 85 / 100) << "site " << s;
    EXPECT_LT(home, site.size()) << "site " << s << " saw no other class";
    EXPECT_GT(present.size(), 3u) << "site " << s;
  }
}

TEST(DigitsDataTest, SplitIsDeterministicPerSeed) {
  SplitOptions options;
  absl::StatusOr<Split> a = SplitNonIid(Digits(), options);
  absl::StatusOr<Split> b = SplitNonIid(Digits(), options);
  options.seed = 2;
  absl::StatusOr<Split> c = SplitNonIid(Digits(), options);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->test.Fingerprint(), b->test.Fingerprint());
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(a->sites[s].Fingerprint(), b->sites[s].Fingerprint());
  }
  EXPECT_NE(a->test.Fingerprint(), c->test.Fingerprint());
}

TEST(DigitsDataTest, SplitRejectsBadOptions) {
  for (int sites : {0, kClasses + 1}) {
    SplitOptions options;
    options.sites = sites;
    EXPECT_EQ(SplitNonIid(Digits(), options).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  SplitOptions options;
  options.home_fraction = 1.5;
  EXPECT_EQ(SplitNonIid(Digits(), options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DigitsDataTest, HomeSitesCoverEveryClassInContiguousRuns) {
  EXPECT_EQ(HomeSite(0, 4), 0);
  EXPECT_EQ(HomeSite(2, 4), 0);
  EXPECT_EQ(HomeSite(3, 4), 1);
  EXPECT_EQ(HomeSite(5, 4), 2);
  EXPECT_EQ(HomeSite(9, 4), 3);
  for (int c = 0; c < kClasses; ++c) EXPECT_EQ(HomeSite(c, 1), 0);
  for (int c = 0; c < kClasses; ++c) EXPECT_EQ(HomeSite(c, kClasses), c);
}

}  // namespace
}  // namespace fedgather::fedavg
