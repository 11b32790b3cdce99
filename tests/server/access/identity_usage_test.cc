#include "server/access/identity_usage.h"

#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fedgather::server {
namespace {

using ::testing::HasSubstr;
using Resource = IdentityUsage::Resource;

TEST(IdentityUsageTest, RefusesPastTheLimitForThatIdentityOnly) {
  IdentityUsage usage;
  std::vector<IdentityUsage::Lease> held;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<IdentityUsage::Lease> lease =
        usage.Acquire("a", Resource::kStreams, 2);
    ASSERT_TRUE(lease.ok()) << lease.status();
    held.push_back(*std::move(lease));
  }
  const absl::Status refused =
      usage.Acquire("a", Resource::kStreams, 2).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("identity 'a' already holds 2 open streams, the limit "
                        "its policy sets (max_concurrent_streams: 2)"));
  // Another identity, and another resource of the same identity, are free.
  EXPECT_TRUE(usage.Acquire("b", Resource::kStreams, 2).ok());
  absl::StatusOr<IdentityUsage::Lease> group =
      usage.Acquire("a", Resource::kGroups, 1);
  ASSERT_TRUE(group.ok());
  const absl::Status groups = usage.Acquire("a", Resource::kGroups, 1).status();
  EXPECT_THAT(std::string(groups.message()),
              HasSubstr("1 group memberships, the limit its policy sets "
                        "(max_groups: 1)"));
  absl::StatusOr<IdentityUsage::Lease> round =
      usage.Acquire("a", Resource::kRounds, 1);
  ASSERT_TRUE(round.ok());
  EXPECT_THAT(
      std::string(usage.Acquire("a", Resource::kRounds, 1).status().message()),
      HasSubstr("1 rounds in flight, the limit its policy sets "
                "(max_rounds_in_flight: 1)"));
  EXPECT_EQ(usage.InUse("a", Resource::kStreams), 2);
  EXPECT_EQ(usage.InUse("b", Resource::kStreams), 0);  // its lease is gone
}

TEST(IdentityUsageTest, LeasesGiveBackOnceWhenReleasedMovedOrDestroyed) {
  IdentityUsage usage;
  absl::StatusOr<IdentityUsage::Lease> first =
      usage.Acquire("a", Resource::kStreams, 1);
  ASSERT_TRUE(first.ok());
  IdentityUsage::Lease moved = *std::move(first);
  EXPECT_EQ(usage.InUse("a", Resource::kStreams), 1);
  IdentityUsage::Lease target;
  target = std::move(moved);
  EXPECT_EQ(usage.InUse("a", Resource::kStreams), 1);
  target.Release();
  target.Release();
  EXPECT_EQ(usage.InUse("a", Resource::kStreams), 0);
  {
    absl::StatusOr<IdentityUsage::Lease> scoped =
        usage.Acquire("a", Resource::kStreams, 1);
    ASSERT_TRUE(scoped.ok());
    EXPECT_FALSE(usage.Acquire("a", Resource::kStreams, 1).ok());
  }
  EXPECT_TRUE(usage.Acquire("a", Resource::kStreams, 1).ok());
}

}  // namespace
}  // namespace fedgather::server
