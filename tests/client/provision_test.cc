#include "client/provision.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <string>

#include "common/file_io.h"
#include "common/peer_identity.h"
#include "server/group_config.h"

namespace fedgather {
namespace {

std::string TempDir() {
  std::string path = ::testing::TempDir() + "provision-XXXXXX";
  EXPECT_NE(::mkdtemp(path.data()), nullptr);
  return path;
}

int Mode(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

TEST(ProvisionTest, WritesEveryFileWithIdentitiesAndPrivateKeys) {
  ProvisionOptions options;
  options.out_dir = TempDir() + "/pki";
  options.server_names = {"localhost", "127.0.0.1"};
  options.participants = {"site-1", "site-2", "site-3"};
  ASSERT_TRUE(Provision(options).ok());
  const std::string& dir = options.out_dir;
  EXPECT_EQ(Mode(dir + "/ca-key.pem"), 0600);
  EXPECT_EQ(Mode(dir + "/server/key.pem"), 0600);
  for (const std::string& name : options.participants) {
    EXPECT_EQ(Mode(dir + "/" + name + "/key.pem"), 0600);
    auto cert = ReadFileToString(dir + "/" + name + "/cert.pem");
    ASSERT_TRUE(cert.ok());
    EXPECT_EQ(IdentityFromCertificatePem(*cert).value(),
              ParticipantIdentity(name));
    EXPECT_EQ(ReadFileToString(dir + "/" + name + "/ca.pem").value(),
              ReadFileToString(dir + "/ca.pem").value());
  }
  auto server = ReadFileToString(dir + "/server/cert.pem");
  ASSERT_TRUE(server.ok());
  EXPECT_EQ(IdentityFromCertificatePem(*server).value(), "localhost");

  // The groups file is what the server loads.
  auto groups = server::LoadGroupsFile(dir + "/groups.yaml");
  ASSERT_TRUE(groups.ok()) << groups.status();
  ASSERT_EQ(groups->size(), 1u);
  EXPECT_EQ((*groups)[0].name, "demo");
  EXPECT_EQ((*groups)[0].world_size, 3);
  EXPECT_EQ((*groups)[0].members,
            (std::vector<std::string>{"spiffe://fedgather/site-1",
                                      "spiffe://fedgather/site-2",
                                      "spiffe://fedgather/site-3"}));
}

TEST(ProvisionTest, RejectsBadNames) {
  ProvisionOptions options;
  options.out_dir = TempDir();
  options.server_names = {"localhost"};
  options.participants = {"a/b"};
  EXPECT_EQ(Provision(options).code(), absl::StatusCode::kInvalidArgument);
  options.participants = {"x", "x"};
  EXPECT_EQ(Provision(options).code(), absl::StatusCode::kInvalidArgument);
  options.participants = {};
  EXPECT_EQ(Provision(options).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedgather
