#include "server/group_config.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fedgather::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

void ExpectInvalid(const absl::Status& status,
                   const std::vector<std::string>& substrings) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  for (const std::string& s : substrings) {
    EXPECT_THAT(std::string(status.message()), HasSubstr(s));
  }
}

TEST(ParseGroupsYamlTest, ParsesValidFile) {
  const char* yaml = R"(
groups:
  - name: demo
    world_size: 2
    members: [spiffe://fedgather/site-1, spiffe://fedgather/site-2]
  - name: big
    world_size: 3
    members:
      - spiffe://fedgather/a
      - spiffe://fedgather/b
      - spiffe://fedgather/c
      - spiffe://fedgather/spare
)";
  absl::StatusOr<std::vector<GroupConfig>> groups =
      ParseGroupsYaml(yaml, "groups.yaml");
  ASSERT_TRUE(groups.ok()) << groups.status();
  ASSERT_EQ(groups->size(), 2u);
  EXPECT_EQ((*groups)[0].name, "demo");
  EXPECT_EQ((*groups)[0].world_size, 2);
  EXPECT_THAT((*groups)[0].members, ElementsAre("spiffe://fedgather/site-1",
                                                "spiffe://fedgather/site-2"));
  EXPECT_EQ((*groups)[1].name, "big");
  EXPECT_EQ((*groups)[1].world_size, 3);
  EXPECT_THAT((*groups)[1].members,
              ElementsAre("spiffe://fedgather/a", "spiffe://fedgather/b",
                          "spiffe://fedgather/c", "spiffe://fedgather/spare"));
}

TEST(ParseGroupsYamlTest, EmptyGroupListIsValid) {
  absl::StatusOr<std::vector<GroupConfig>> groups =
      ParseGroupsYaml("groups: []\n", "g.yaml");
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_TRUE(groups->empty());
}

TEST(ParseGroupsYamlTest, RejectsUnknownGroupKey) {
  ExpectInvalid(ParseGroupsYaml(R"(
groups:
  - name: demo
    world_size: 1
    members: [a]
    timeout: 5
)",
                                "g.yaml")
                    .status(),
                {"g.yaml", "unknown key 'timeout'"});
}

TEST(ParseGroupsYamlTest, RejectsUnknownTopLevelKey) {
  ExpectInvalid(ParseGroupsYaml(R"(
groups:
  - name: demo
    world_size: 1
    members: [a]
extra: true
)",
                                "g.yaml")
                    .status(),
                {"g.yaml", "unknown top-level key 'extra'"});
}

TEST(ParseGroupsYamlTest, RejectsMissingName) {
  ExpectInvalid(ParseGroupsYaml(R"(
groups:
  - world_size: 1
    members: [a]
)",
                                "g.yaml")
                    .status(),
                {"g.yaml", "a group has no name"});
}

TEST(ParseGroupsYamlTest, RejectsWorldSizeZero) {
  ExpectInvalid(ParseGroupsYaml(R"(
groups:
  - name: demo
    world_size: 0
    members: [a]
)",
                                "g.yaml")
                    .status(),
                {"g.yaml", "group 'demo' has world_size 0", "1..4096"});
}

TEST(ParseGroupsYamlTest, RejectsWorldSizeAboveLimit) {
  ExpectInvalid(ParseGroupsYaml(R"(
groups:
  - name: demo
    world_size: 4097
    members: [a]
)",
                                "g.yaml")
                    .status(),
                {"group 'demo' has world_size 4097"});
}

TEST(ParseGroupsYamlTest, RejectsMissingWorldSize) {
  ExpectInvalid(ParseGroupsYaml(R"(
groups:
  - name: demo
    members: [a]
)",
                                "g.yaml")
                    .status(),
                {"group 'demo' has world_size 0"});
}

TEST(ParseGroupsYamlTest, RejectsFewerMembersThanWorldSize) {
  ExpectInvalid(ParseGroupsYaml(R"(
groups:
  - name: demo
    world_size: 3
    members: [a, b]
)",
                                "g.yaml")
                    .status(),
                {"g.yaml", "group 'demo' has world_size 3 but only 2 members"});
}

TEST(ParseGroupsYamlTest, RejectsDuplicateMember) {
  ExpectInvalid(ParseGroupsYaml(R"(
groups:
  - name: demo
    world_size: 2
    members: [a, b, a]
)",
                                "g.yaml")
                    .status(),
                {"g.yaml", "group 'demo' lists 'a' twice"});
}

TEST(ParseGroupsYamlTest, RejectsEmptyMember) {
  ExpectInvalid(ParseGroupsYaml(R"(
groups:
  - name: demo
    world_size: 1
    members: [""]
)",
                                "g.yaml")
                    .status(),
                {"group 'demo' lists an empty identity"});
}

TEST(ParseGroupsYamlTest, RejectsDuplicateGroup) {
  ExpectInvalid(ParseGroupsYaml(R"(
groups:
  - name: demo
    world_size: 1
    members: [a]
  - name: demo
    world_size: 1
    members: [b]
)",
                                "g.yaml")
                    .status(),
                {"g.yaml", "group 'demo' is defined twice"});
}

TEST(ParseGroupsYamlTest, RejectsMembersThatAreNotAList) {
  ExpectInvalid(ParseGroupsYaml(R"(
groups:
  - name: demo
    world_size: 1
    members: a
)",
                                "g.yaml")
                    .status(),
                {"'members' must be a list of identities"});
}

TEST(ParseGroupsYamlTest, RejectsNonNumericWorldSize) {
  ExpectInvalid(ParseGroupsYaml(R"(
groups:
  - name: demo
    world_size: four
    members: [a]
)",
                                "g.yaml")
                    .status(),
                {"g.yaml: "});
}

TEST(ParseGroupsYamlTest, RejectsNotYaml) {
  ExpectInvalid(ParseGroupsYaml("groups: [unclosed\n", "g.yaml").status(),
                {"g.yaml: "});
  ExpectInvalid(ParseGroupsYaml("{ : : [\n", "g.yaml").status(), {"g.yaml: "});
}

TEST(ParseGroupsYamlTest, RejectsWrongShape) {
  ExpectInvalid(ParseGroupsYaml("just a string\n", "g.yaml").status(),
                {"g.yaml: expected a top-level 'groups:' list"});
  ExpectInvalid(ParseGroupsYaml("groups: demo\n", "g.yaml").status(),
                {"expected a top-level 'groups:' list"});
  ExpectInvalid(ParseGroupsYaml("", "g.yaml").status(),
                {"expected a top-level 'groups:' list"});
  ExpectInvalid(
      ParseGroupsYaml("groups:\n  - just-a-name\n", "g.yaml").status(),
      {"each group must be a mapping"});
}

TEST(ParseGroupFlagTest, ParsesValidFlag) {
  absl::StatusOr<GroupConfig> group =
      ParseGroupFlag("demo:2=spiffe://x/a,spiffe://x/b,spiffe://x/c");
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ(group->name, "demo");
  EXPECT_EQ(group->world_size, 2);
  EXPECT_THAT(group->members,
              ElementsAre("spiffe://x/a", "spiffe://x/b", "spiffe://x/c"));
}

TEST(ParseGroupFlagTest, RejectsMissingSeparators) {
  ExpectInvalid(ParseGroupFlag("demo=a,b").status(),
                {"--group 'demo=a,b'", "missing ':' or '='",
                 "expected NAME:WORLD_SIZE=ID1,ID2,..."});
  ExpectInvalid(ParseGroupFlag("demo:2").status(), {"missing ':' or '='"});
  ExpectInvalid(ParseGroupFlag("demo=a:2").status(), {"missing ':' or '='"});
}

TEST(ParseGroupFlagTest, RejectsNonNumericWorldSize) {
  ExpectInvalid(ParseGroupFlag("demo:two=a,b").status(),
                {"the world size is not a number"});
}

TEST(ParseGroupFlagTest, RejectsInvalidGroups) {
  ExpectInvalid(ParseGroupFlag(":1=a").status(),
                {"--group", "a group has no name"});
  ExpectInvalid(ParseGroupFlag("demo:0=a").status(),
                {"group 'demo' has world_size 0"});
  ExpectInvalid(ParseGroupFlag("demo:3=a,b").status(),
                {"group 'demo' has world_size 3 but only 2 members"});
  ExpectInvalid(ParseGroupFlag("demo:2=a,a").status(),
                {"group 'demo' lists 'a' twice"});
  ExpectInvalid(ParseGroupFlag("demo:1=").status(),
                {"has world_size 1 but only 0 members"});
}

TEST(NotAMemberErrorTest, IsPermissionDenied) {
  const absl::Status status = NotAMemberError("spiffe://x/eve", "demo");
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("identity 'spiffe://x/eve' may not use group 'demo'"));
}

}  // namespace
}  // namespace fedgather::server
