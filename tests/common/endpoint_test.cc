#include "common/endpoint.h"

#include "gtest/gtest.h"

namespace fedgather {
namespace {

TEST(SplitEndpoint, ReadsHostsAndPorts) {
  auto v4 = SplitEndpoint("10.1.2.3:7000");
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->host, "10.1.2.3");
  EXPECT_EQ(v4->port, 7000);
  auto v6 = SplitEndpoint("[fd00::1]:0");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "fd00::1");
  EXPECT_EQ(v6->port, 0);
  auto name = SplitEndpoint("site-1.fedgather:65535");
  ASSERT_TRUE(name.ok());
  EXPECT_EQ(name->host, "site-1.fedgather");
}

TEST(SplitEndpoint, RefusesWhatIsNoEndpoint) {
  for (const char* text : {"", "host", ":7000", "host:", "host:65536",
                           "host:-1", "host:7x", "[]:7000"}) {
    EXPECT_EQ(SplitEndpoint(text).status().code(),
              absl::StatusCode::kInvalidArgument)
        << text;
  }
}

}  // namespace
}  // namespace fedgather
