#include "common/ip_network.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fedgather {
namespace {

using ::testing::HasSubstr;

TEST(IpNetwork, ContainsTheAddressesOfItsPrefixOnly) {
  auto ten = IpNetwork::Parse("10.0.0.0/8");
  ASSERT_TRUE(ten.ok()) << ten.status();
  EXPECT_TRUE(ten->Contains("10.0.0.0"));
  EXPECT_TRUE(ten->Contains("10.255.255.255"));
  EXPECT_FALSE(ten->Contains("11.0.0.0"));
  EXPECT_FALSE(ten->Contains("9.255.255.255"));
  EXPECT_FALSE(ten->Contains("::ffff:10.0.0.1"));  // no family crossing
  EXPECT_FALSE(ten->Contains("site-1.example"));
  auto odd = IpNetwork::Parse("192.168.4.0/22");
  ASSERT_TRUE(odd.ok());
  EXPECT_TRUE(odd->Contains("192.168.7.255"));
  EXPECT_FALSE(odd->Contains("192.168.8.0"));
  EXPECT_FALSE(odd->Contains("192.168.3.255"));
  auto host = IpNetwork::Parse("127.0.0.1/32");
  ASSERT_TRUE(host.ok());
  EXPECT_TRUE(host->Contains("127.0.0.1"));
  EXPECT_FALSE(host->Contains("127.0.0.2"));
  auto any = IpNetwork::Parse("0.0.0.0/0");
  ASSERT_TRUE(any.ok());
  EXPECT_TRUE(any->Contains("203.0.113.9"));
  EXPECT_FALSE(any->Contains("::1"));
  auto ula = IpNetwork::Parse("fd00::/8");
  ASSERT_TRUE(ula.ok());
  EXPECT_TRUE(ula->Contains("fd12:3456::1"));
  EXPECT_FALSE(ula->Contains("fe80::1"));
  EXPECT_FALSE(ula->Contains("10.0.0.1"));
  EXPECT_EQ(ula->text(), "fd00::/8");
}

TEST(IpNetwork, RefusesWhatIsNoNetwork) {
  for (const char* text :
       {"10.0.0.0", "10.0.0.0/33", "10.0.0.0/-1", "10.0.0.0/x", "/8",
        "example.com/8", "fd00::/129", "10.0.0.1/8", "fd00::1/8", ""}) {
    auto parsed = IpNetwork::Parse(text);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument)
        << text;
  }
  EXPECT_THAT(IpNetwork::Parse("10.0.0.1/8").status().message(),
              HasSubstr("bits set past the prefix"));
}

}  // namespace
}  // namespace fedgather
