#include "server/access/access_policy.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fedgather::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kPolicy[] = R"(
version: 1
server_admins: [spiffe://fedgather/ops]
limits:
  max_contribution_bytes: 64MiB
  max_tensors_per_contribution: 16
identity_limits:
  spiffe://fedgather/site-2:
    max_concurrent_streams: 3
    max_contribution_bytes: 1024
    max_rounds_in_flight: 2
groups:
  - name: demo
    world_size: 2
    min_quorum: 1
    round_deadline: 1m30s
    max_rounds_in_flight: 3
    members:
      spiffe://fedgather/site-2: participant
      spiffe://fedgather/site-1: participant
      spiffe://fedgather/dash: observer
      spiffe://fedgather/ops: admin
  - name: other
    world_size: 1
    members:
      spiffe://fedgather/site-3: participant
)";

AccessPolicy MustParse(const std::string& yaml) {
  absl::StatusOr<AccessPolicy> policy = AccessPolicy::Parse(yaml, "p.yaml");
  EXPECT_TRUE(policy.ok()) << policy.status();
  return *std::move(policy);
}

void ExpectInvalid(const std::string& yaml,
                   const std::vector<std::string>& substrings) {
  const absl::Status status = AccessPolicy::Parse(yaml, "p.yaml").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("p.yaml"));
  for (const std::string& s : substrings) {
    EXPECT_THAT(std::string(status.message()), HasSubstr(s));
  }
}

TEST(AccessPolicyTest, ParsesGroupsRolesAndQuorum) {
  const AccessPolicy policy = MustParse(kPolicy);
  ASSERT_EQ(policy.groups().size(), 2u);
  EXPECT_EQ(policy.groups()[0].name, "demo");
  EXPECT_EQ(policy.groups()[0].world_size, 2);
  EXPECT_EQ(policy.groups()[0].min_quorum, 1);
  EXPECT_EQ(policy.groups()[0].members.size(), 4u);
  const std::vector<GroupConfig> configs = policy.GroupConfigs();
  ASSERT_EQ(configs.size(), 2u);
  // Only participants run in the group; sorted by identity.
  EXPECT_THAT(configs[0].members, ElementsAre("spiffe://fedgather/site-1",
                                              "spiffe://fedgather/site-2"));
  EXPECT_EQ(configs[0].min_quorum, 1);
  EXPECT_EQ(configs[1].min_quorum, 0);
  EXPECT_EQ(configs[0].round_deadline, absl::Seconds(90));
  EXPECT_EQ(configs[1].round_deadline, absl::ZeroDuration());
  EXPECT_EQ(configs[0].max_rounds_in_flight, 3);
  EXPECT_EQ(configs[1].max_rounds_in_flight, kDefaultGroupRoundsInFlight);
  EXPECT_EQ(policy.RoleOf("spiffe://fedgather/dash", "demo"), Role::kObserver);
  EXPECT_EQ(policy.RoleOf("spiffe://fedgather/dash", "other"), std::nullopt);
  EXPECT_EQ(policy.sha256().size(), 64u);
  EXPECT_TRUE(configs[0].peer_networks.empty());  // any endpoint
}

TEST(AccessPolicyTest, PeerNetworksRestrictTheEndpointsAGroupAdmits) {
  const AccessPolicy policy = MustParse(
      "version: 1\ngroups:\n  - name: g\n    world_size: 1\n"
      "    peer_networks: [10.0.0.0/8, 'fd00::/8']\n"
      "    members: {a: participant}\n");
  const std::vector<GroupConfig> configs = policy.GroupConfigs();
  ASSERT_EQ(configs[0].peer_networks.size(), 2u);
  EXPECT_EQ(configs[0].peer_networks[1].text(), "fd00::/8");
  EXPECT_TRUE(CheckPeerEndpoint("10.9.8.7:7000", configs[0]).ok());
  EXPECT_TRUE(CheckPeerEndpoint("[fd00::7]:7000", configs[0]).ok());
  EXPECT_EQ(CheckPeerEndpoint("192.168.1.1:7000", configs[0]).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckPeerEndpoint("[fe80::1]:7000", configs[0]).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(AccessPolicyTest, EachRoleMayDoOnlyItsActions) {
  const AccessPolicy policy = MustParse(kPolicy);
  struct Case {
    const char* identity;
    Action action;
    bool allowed;
  };
  const Case cases[] = {
      {"spiffe://fedgather/site-1", Action::kJoin, true},
      {"spiffe://fedgather/site-1", Action::kContribute, true},
      {"spiffe://fedgather/site-1", Action::kReadStatus, true},
      {"spiffe://fedgather/site-1", Action::kAbortRound, false},
      {"spiffe://fedgather/dash", Action::kJoin, false},
      {"spiffe://fedgather/dash", Action::kContribute, false},
      {"spiffe://fedgather/dash", Action::kReadStatus, true},
      {"spiffe://fedgather/dash", Action::kAbortRound, false},
      {"spiffe://fedgather/ops", Action::kJoin, false},
      {"spiffe://fedgather/ops", Action::kContribute, false},
      {"spiffe://fedgather/ops", Action::kReadStatus, true},
      {"spiffe://fedgather/ops", Action::kAbortRound, true},
  };
  for (const Case& c : cases) {
    const absl::Status status = policy.Authorize(c.identity, "demo", c.action);
    EXPECT_EQ(status.ok(), c.allowed)
        << c.identity << " " << ActionName(c.action) << ": " << status;
    if (!c.allowed) {
      EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
      EXPECT_THAT(std::string(status.message()), HasSubstr("has role"));
      EXPECT_THAT(std::string(status.message()),
                  HasSubstr(ActionName(c.action)));
    }
  }
}

TEST(AccessPolicyTest, UnknownGroupAndNonMemberGetTheSameAnswer) {
  const AccessPolicy policy = MustParse(kPolicy);
  const absl::Status not_member =
      policy.Authorize("spiffe://fedgather/site-1", "other", Action::kJoin);
  const absl::Status no_group =
      policy.Authorize("spiffe://fedgather/site-1", "nope", Action::kJoin);
  EXPECT_EQ(not_member.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(no_group.code(), absl::StatusCode::kPermissionDenied);
  // Identical apart from the group name the caller chose.
  EXPECT_EQ(
      std::string(not_member.message()),
      std::string(
          NotAMemberError("spiffe://fedgather/site-1", "other").message()));
  EXPECT_EQ(
      std::string(no_group.message()),
      std::string(
          NotAMemberError("spiffe://fedgather/site-1", "nope").message()));
  // Nothing names another group or member.
  EXPECT_THAT(std::string(not_member.message()),
              ::testing::Not(HasSubstr("site-3")));
}

TEST(AccessPolicyTest, OnlyServerAdminsReload) {
  const AccessPolicy policy = MustParse(kPolicy);
  EXPECT_TRUE(
      policy.Authorize("spiffe://fedgather/ops", "", Action::kReloadPolicy)
          .ok());
  const absl::Status denied =
      policy.Authorize("spiffe://fedgather/site-1", "", Action::kReloadPolicy);
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(denied.message()), HasSubstr("not a server admin"));
}

TEST(AccessPolicyTest, LimitsAreDefaultsOverriddenPerIdentity) {
  const AccessPolicy policy = MustParse(kPolicy);
  const IdentityLimits site1 = policy.LimitsFor("spiffe://fedgather/site-1");
  EXPECT_EQ(site1.max_contribution_bytes, int64_t{64} << 20);
  EXPECT_EQ(site1.max_tensors_per_contribution, 16);
  EXPECT_EQ(site1.max_concurrent_streams,
            IdentityLimits{}.max_concurrent_streams);
  EXPECT_EQ(site1.max_groups, IdentityLimits{}.max_groups);
  const IdentityLimits site2 = policy.LimitsFor("spiffe://fedgather/site-2");
  EXPECT_EQ(site2.max_contribution_bytes, 1024);
  EXPECT_EQ(site2.max_concurrent_streams, 3);
  EXPECT_EQ(site2.max_tensors_per_contribution, 16);
  EXPECT_EQ(site2.max_rounds_in_flight, 2);
  EXPECT_EQ(site1.max_rounds_in_flight, IdentityLimits{}.max_rounds_in_flight);
}

TEST(AccessPolicyTest, SafeDefaultsWithoutLimits) {
  const AccessPolicy policy = MustParse(
      "version: 1\ngroups:\n  - name: g\n    world_size: 1\n    members: "
      "{a: participant}\n");
  const IdentityLimits limits = policy.LimitsFor("a");
  EXPECT_EQ(limits.max_contribution_bytes, int64_t{8} << 30);
  EXPECT_EQ(limits.max_tensors_per_contribution, 4096);
  EXPECT_EQ(limits.max_concurrent_streams, 32);
  EXPECT_EQ(limits.max_groups, 8);
  EXPECT_EQ(limits.max_rounds_in_flight, 8);
  EXPECT_EQ(policy.GroupConfigs()[0].max_rounds_in_flight, 4);
}

TEST(AccessPolicyTest, IdentitiesAreComparedExactly) {
  const AccessPolicy policy = MustParse(kPolicy);
  EXPECT_FALSE(
      policy.Authorize("SPIFFE://fedgather/site-1", "demo", Action::kJoin)
          .ok());
  EXPECT_FALSE(
      policy.Authorize("spiffe://fedgather/site-1 ", "demo", Action::kJoin)
          .ok());
}

TEST(AccessPolicyTest, RejectsMalformedPolicies) {
  const std::string group =
      "groups:\n  - name: g\n    world_size: 1\n    members: {a: "
      "participant}\n";
  ExpectInvalid("groups: []\n", {"'version: 1' is missing"});
  ExpectInvalid("version: 2\ngroups: []\n", {"version 2 is not supported"});
  ExpectInvalid("version: 1\nfoo: 1\n", {"unknown top-level key 'foo'"});
  ExpectInvalid("version: 1\ngroups:\n  - world_size: 1\n",
                {"a group has no name"});
  ExpectInvalid(
      "version: 1\ngroups:\n  - name: g\n    members: {a: participant}\n",
      {"group 'g'", "world_size is missing"});
  ExpectInvalid(
      "version: 1\ngroups:\n  - name: g\n    world_size: 0\n    members: {a: "
      "participant}\n",
      {"world_size", "'0' is not a whole number in 1..4096"});
  ExpectInvalid("version: 1\ngroups:\n  - name: g\n    world_size: 5000\n",
                {"1..4096"});
  ExpectInvalid(
      "version: 1\ngroups:\n  - name: g\n    world_size: 2\n    members: {a: "
      "participant, b: observer}\n",
      {"world_size is 2 but only 1 members are participants"});
  ExpectInvalid(
      "version: 1\ngroups:\n  - name: g\n    world_size: 1\n    min_quorum: "
      "2\n    members: {a: participant}\n",
      {"min_quorum 2 is larger than world_size 1"});
  ExpectInvalid(
      "version: 1\ngroups:\n  - name: g\n    world_size: 1\n    "
      "round_deadline: "
      "soon\n    members: {a: participant}\n",
      {"group 'g'", "round_deadline",
       "'soon' is not a positive duration (such as 30s, 2m, 1h30m)"});
  ExpectInvalid(
      "version: 1\ngroups:\n  - name: g\n    world_size: 1\n    "
      "round_deadline: "
      "-5s\n    members: {a: participant}\n",
      {"'-5s' is not a positive duration"});
  ExpectInvalid(
      "version: 1\ngroups:\n  - name: g\n    world_size: 1\n    members: {a: "
      "boss}\n",
      {"member 'a'", "unknown role 'boss'"});
  ExpectInvalid(
      "version: 1\ngroups:\n  - name: g\n    world_size: 1\n    members: [a]\n",
      {"members", "expected a mapping"});
  ExpectInvalid(
      "version: 1\ngroups:\n  - name: g\n    world_size: 1\n    colour: red\n",
      {"unknown key 'colour'"});
  ExpectInvalid("version: 1\n" + group + "  - name: g\n    world_size: 1\n" +
                    "    members: {a: participant}\n",
                {"group 'g' is defined twice"});
  ExpectInvalid(
      "version: 1\ngroups:\n  - name: g\n    world_size: 1\n    members:\n"
      "      a: participant\n      a: observer\n",
      {"'a'"});
  ExpectInvalid("version: 1\nlimits: {max_groups: 0}\n",
                {"max_groups", "'0' is not a whole number"});
  ExpectInvalid("version: 1\nlimits: {max_rounds_in_flight: 0}\n",
                {"max_rounds_in_flight"});
  ExpectInvalid(
      "version: 1\ngroups:\n  - name: g\n    world_size: 1\n"
      "    max_rounds_in_flight: 0\n    members: {a: participant}\n",
      {"group 'g'", "max_rounds_in_flight"});
  ExpectInvalid("version: 1\nlimits: {max_contribution_bytes: 12XB}\n",
                {"'12XB' is not a positive byte count"});
  ExpectInvalid("version: 1\nlimits: {max_streams: 3}\n",
                {"unknown limit 'max_streams'"});
  ExpectInvalid("version: 1\nidentity_limits: {a: {max_groups: -1}}\n",
                {"identity_limits: 'a'"});
  ExpectInvalid("version: 1\nserver_admins: ops\n",
                {"expected a list of identities"});
  ExpectInvalid(
      "version: 1\ngroups:\n  - name: g\n    world_size: 1\n"
      "    peer_networks: 10.0.0.0/8\n    members: {a: participant}\n",
      {"group 'g'", "peer_networks", "expected a list of networks"});
  ExpectInvalid(
      "version: 1\ngroups:\n  - name: g\n    world_size: 1\n"
      "    peer_networks: [10.0.0.1/8]\n    members: {a: participant}\n",
      {"peer_networks", "'10.0.0.1/8' is not a network in CIDR notation",
       "bits set past the prefix"});
  ExpectInvalid("version: 1\ngroups: [\n", {});
  ExpectInvalid("just text", {"a policy is a mapping"});
}

TEST(AccessPolicyTest, ParsesByteUnits) {
  for (const auto& [text, bytes] : std::vector<std::pair<std::string, int64_t>>{
           {"1", 1},
           {"2KiB", 2048},
           {"3 MiB", 3 << 20},
           {"8GiB", int64_t{8} << 30},
           {"1TiB", int64_t{1} << 40}}) {
    const AccessPolicy policy = MustParse(
        "version: 1\nlimits: {max_contribution_bytes: " + text + "}\n");
    EXPECT_EQ(policy.LimitsFor("x").max_contribution_bytes, bytes) << text;
  }
  ExpectInvalid("version: 1\nlimits: {max_contribution_bytes: 99999999TiB}\n",
                {"not a positive byte count"});
}

TEST(AccessPolicyTest, LoadNamesTheMissingFile) {
  const absl::Status status =
      AccessPolicy::Load("/nonexistent/policy.yaml").status();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("/nonexistent/policy.yaml"));
}

TEST(NotAMemberErrorTest, IsPermissionDenied) {
  const absl::Status status = NotAMemberError("spiffe://x/eve", "demo");
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("identity 'spiffe://x/eve' may not use group 'demo'"));
}

}  // namespace
}  // namespace fedgather::server
