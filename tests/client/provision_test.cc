#include "client/provision.h"

#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "common/file_io.h"
#include "common/openssl_util.h"
#include "common/peer_identity.h"
#include "server/access/access_policy.h"
#include "tests/common/x509_test_util.h"

namespace fedgather {
namespace {

using x509_test::ParseCert;
using x509_test::ParseKey;
using x509_test::Sans;
using x509_test::VerifyError;

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

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string Read(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFileToString(path);
  EXPECT_TRUE(contents.ok()) << contents.status();
  return contents.ok() ? *contents : "";
}

// ExpectKeyPair checks that DIR/key.pem (mode 0600) holds the key of
// DIR/cert.pem.
void ExpectKeyPair(const std::string& key_path, const std::string& cert_path) {
  EXPECT_EQ(Mode(key_path), 0600) << key_path;
  EXPECT_EQ(Mode(cert_path), 0644) << cert_path;
  OpenSslPtr<EVP_PKEY> key = ParseKey(Read(key_path));
  OpenSslPtr<X509> cert = ParseCert(Read(cert_path));
  ASSERT_TRUE(key != nullptr && cert != nullptr) << key_path;
  EXPECT_EQ(X509_check_private_key(cert.get(), key.get()), 1) << key_path;
}

ProvisionOptions ThreeSites(const std::string& out_dir) {
  ProvisionOptions options;
  options.out_dir = out_dir;
  options.server_names = {"localhost", "127.0.0.1"};
  options.participants = {"site-1", "site-2", "site-3"};
  return options;
}

TEST(ProvisionTest, WritesEveryFileWithIdentitiesAndPrivateKeys) {
  // A missing parent is created too.
  const ProvisionOptions options = ThreeSites(TempDir() + "/new/pki");
  const absl::Status status = Provision(options);
  ASSERT_TRUE(status.ok()) << status;
  const std::string& dir = options.out_dir;
  EXPECT_EQ(Mode(dir), 0755);
  EXPECT_EQ(Mode(dir + "/server"), 0755);
  EXPECT_EQ(Mode(dir + "/policy.yaml"), 0644);
  ExpectKeyPair(dir + "/ca-key.pem", dir + "/ca.pem");
  const std::string ca_pem = Read(dir + "/ca.pem");
  OpenSslPtr<X509> ca = ParseCert(ca_pem);
  ASSERT_NE(ca, nullptr);
  EXPECT_EQ(X509_check_ca(ca.get()), 1);

  for (const std::string& name : options.participants) {
    SCOPED_TRACE(name);
    const std::string site = dir + "/" + name;
    EXPECT_EQ(Mode(site), 0755);
    ExpectKeyPair(site + "/key.pem", site + "/cert.pem");
    EXPECT_EQ(Read(site + "/ca.pem"), ca_pem);
    const std::string cert_pem = Read(site + "/cert.pem");
    EXPECT_EQ(VerifyError(ca_pem, cert_pem, X509_PURPOSE_SSL_CLIENT),
              X509_V_OK);
    // clientAuth only: the certificate cannot serve.
    EXPECT_EQ(VerifyError(ca_pem, cert_pem, X509_PURPOSE_SSL_SERVER),
              X509_V_ERR_INVALID_PURPOSE);
    absl::StatusOr<std::string> identity = IdentityFromCertificatePem(cert_pem);
    ASSERT_TRUE(identity.ok()) << identity.status();
    EXPECT_EQ(*identity, "spiffe://fedgather/" + name);
    EXPECT_EQ(*identity, ParticipantIdentity(name));
    OpenSslPtr<X509> cert = ParseCert(cert_pem);
    char cn[128] = {};
    X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()), NID_commonName,
                              cn, sizeof(cn));
    EXPECT_EQ(std::string(cn), name);
    // No leaf outlives the CA.
    EXPECT_LE(ASN1_TIME_compare(X509_get0_notAfter(cert.get()),
                                X509_get0_notAfter(ca.get())),
              0);
  }

  ExpectKeyPair(dir + "/server/key.pem", dir + "/server/cert.pem");
  EXPECT_EQ(Read(dir + "/server/ca.pem"), ca_pem);
  const std::string server_pem = Read(dir + "/server/cert.pem");
  EXPECT_EQ(VerifyError(ca_pem, server_pem, X509_PURPOSE_SSL_SERVER),
            X509_V_OK);
  // And it may be a client, so that a probe can present it (the server's
  // handshake admits client-auth certificates only).
  EXPECT_EQ(VerifyError(ca_pem, server_pem, X509_PURPOSE_SSL_CLIENT),
            X509_V_OK);
  OpenSslPtr<X509> server = ParseCert(server_pem);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(Sans(server.get(), GEN_DNS), std::vector<std::string>{"localhost"});
  EXPECT_EQ(Sans(server.get(), GEN_IPADD),
            std::vector<std::string>{std::string("\x7f\x00\x00\x01", 4)});
  EXPECT_EQ(X509_check_host(server.get(), "localhost", 0, 0, nullptr), 1);
  EXPECT_EQ(X509_check_ip_asc(server.get(), "127.0.0.1", 0), 1);
  EXPECT_EQ(IdentityFromCertificatePem(server_pem).value(), "localhost");

  // policy.yaml, read by the server's loader, which is what consumes it.
  auto policy = server::AccessPolicy::Load(dir + "/policy.yaml");
  ASSERT_TRUE(policy.ok()) << policy.status();
  const std::vector<server::GroupConfig> groups = policy->GroupConfigs();
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].name, "demo");
  EXPECT_EQ(groups[0].world_size, 3);
  EXPECT_EQ(groups[0].members,
            (std::vector<std::string>{"spiffe://fedgather/site-1",
                                      "spiffe://fedgather/site-2",
                                      "spiffe://fedgather/site-3"}));
}

TEST(ProvisionTest, PolicyGivesObserversAndAdminsTheirRoles) {
  ProvisionOptions options = ThreeSites(TempDir());
  options.observers = {"dashboard"};
  options.admins = {"ops"};
  ASSERT_TRUE(Provision(options).ok());
  auto policy = server::AccessPolicy::Load(options.out_dir + "/policy.yaml");
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->RoleOf("spiffe://fedgather/site-2", "demo"),
            server::Role::kParticipant);
  EXPECT_EQ(policy->RoleOf("spiffe://fedgather/dashboard", "demo"),
            server::Role::kObserver);
  EXPECT_EQ(policy->RoleOf("spiffe://fedgather/ops", "demo"),
            server::Role::kAdmin);
  EXPECT_TRUE(policy
                  ->Authorize("spiffe://fedgather/ops", "",
                              server::Action::kReloadPolicy)
                  .ok());
  EXPECT_EQ(policy->GroupConfigs()[0].world_size, 3);
  // Observers and admins get client certificates like participants.
  for (const std::string name : {"dashboard", "ops"}) {
    const std::string cert_pem =
        Read(options.out_dir + "/" + name + "/cert.pem");
    EXPECT_EQ(IdentityFromCertificatePem(cert_pem).value(),
              ParticipantIdentity(name));
    EXPECT_EQ(VerifyError(Read(options.out_dir + "/ca.pem"), cert_pem,
                          X509_PURPOSE_SSL_CLIENT),
              X509_V_OK);
  }
  // The default limits are written out, and are what the parser defaults to.
  const server::IdentityLimits limits = policy->LimitsFor("anyone");
  const server::IdentityLimits defaults;
  EXPECT_EQ(limits.max_contribution_bytes, defaults.max_contribution_bytes);
  EXPECT_EQ(limits.max_tensors_per_contribution,
            defaults.max_tensors_per_contribution);
  EXPECT_EQ(limits.max_concurrent_streams, defaults.max_concurrent_streams);
  EXPECT_EQ(limits.max_groups, defaults.max_groups);
}

TEST(ProvisionTest, GroupNameThatYamlReadsAsNullStaysAString) {
  ProvisionOptions options = ThreeSites(TempDir());
  options.group = "null";
  ASSERT_TRUE(Provision(options).ok());
  auto policy = server::AccessPolicy::Load(options.out_dir + "/policy.yaml");
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->groups()[0].name, "null");
}

TEST(ProvisionTest, OverwritesAndForcesKeyModes) {
  const ProvisionOptions options = ThreeSites(TempDir());
  ASSERT_TRUE(Provision(options).ok());
  const std::string key = options.out_dir + "/site-2/key.pem";
  const std::string first = Read(key);
  ASSERT_EQ(::chmod(key.c_str(), 0644), 0);
  ASSERT_EQ(::chmod((options.out_dir + "/ca-key.pem").c_str(), 0644), 0);
  ASSERT_TRUE(Provision(options).ok());
  EXPECT_NE(Read(key), first);
  EXPECT_EQ(Mode(key), 0600);
  EXPECT_EQ(Mode(options.out_dir + "/ca-key.pem"), 0600);
  ExpectKeyPair(key, options.out_dir + "/site-2/cert.pem");
  EXPECT_EQ(VerifyError(Read(options.out_dir + "/ca.pem"),
                        Read(options.out_dir + "/site-2/cert.pem"),
                        X509_PURPOSE_SSL_CLIENT),
            X509_V_OK);
}

TEST(ProvisionTest, RejectsBadOptionsBeforeWritingAnything) {
  const std::string out_dir = TempDir() + "/pki";
  std::vector<ProvisionOptions> bad;
  for (const std::vector<std::string>& participants :
       std::vector<std::vector<std::string>>{{"a/b"},
                                             {"x", "x"},
                                             {},
                                             {""},
                                             {".."},
                                             {"server"},
                                             {"ca.pem"},
                                             {"policy.yaml"},
                                             {"sp ace"},
                                             {std::string(65, 'n')}}) {
    ProvisionOptions options = ThreeSites(out_dir);
    options.participants = participants;
    bad.push_back(options);
  }
  for (const std::vector<std::string>& server_names :
       std::vector<std::vector<std::string>>{
           {}, {""}, {"bad name"}, {"a,b"}, {std::string(65, 's')}}) {
    ProvisionOptions options = ThreeSites(out_dir);
    options.server_names = server_names;
    bad.push_back(options);
  }
  ProvisionOptions options = ThreeSites(out_dir);
  options.group = "a/b";
  bad.push_back(options);
  options = ThreeSites(out_dir);
  options.admins = {"site-1"};  // already a participant
  bad.push_back(options);
  options = ThreeSites(out_dir);
  options.validity = absl::ZeroDuration();
  bad.push_back(options);
  options = ThreeSites("");
  bad.push_back(options);

  for (const ProvisionOptions& options : bad) {
    const absl::Status status = Provision(options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  }
  EXPECT_FALSE(Exists(out_dir));
}

TEST(ProvisionTest, IoErrorNamesThePath) {
  const std::string file = TempDir() + "/file";
  ASSERT_TRUE(WriteStringToFile(file, "not a directory").ok());
  const ProvisionOptions options = ThreeSites(file + "/pki");
  const absl::Status status = Provision(options);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find(file), std::string::npos) << status;

  const absl::Status on_file = Provision(ThreeSites(file));
  EXPECT_FALSE(on_file.ok());
  EXPECT_NE(on_file.message().find(file), std::string::npos) << on_file;
}

TEST(ProvisionTest, ParticipantIdentity) {
  EXPECT_EQ(ParticipantIdentity("site-1"), "spiffe://fedgather/site-1");
}

}  // namespace
}  // namespace fedgather
