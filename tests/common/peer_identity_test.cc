#include "common/peer_identity.h"

#include <gtest/gtest.h>

#include "common/cert_issuer.h"

namespace fedgather {
namespace {

std::string Issue(const CertificateSpec& spec) {
  auto ca = CreateCertificateAuthority("CA", absl::Hours(1));
  EXPECT_TRUE(ca.ok());
  auto leaf = IssueCertificate(*ca, spec);
  EXPECT_TRUE(leaf.ok()) << leaf.status();
  return leaf.ok() ? leaf->cert_pem : "";
}

TEST(PeerIdentityTest, UriWinsOverDnsWhichWinsOverCn) {
  CertificateSpec spec;
  spec.common_name = "cn-name";
  spec.dns_names = {"dns.example", "second.example"};
  spec.uris = {"spiffe://fedgather/site-9", "spiffe://other"};
  EXPECT_EQ(IdentityFromCertificatePem(Issue(spec)).value(),
            "spiffe://fedgather/site-9");
  spec.uris.clear();
  EXPECT_EQ(IdentityFromCertificatePem(Issue(spec)).value(), "dns.example");
  spec.dns_names.clear();
  EXPECT_EQ(IdentityFromCertificatePem(Issue(spec)).value(), "cn-name");
}

TEST(PeerIdentityTest, GarbageIsInvalidArgument) {
  EXPECT_EQ(IdentityFromCertificatePem("-----BEGIN CERTIFICATE-----\nzz\n")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(IdentityFromCertificatePem("").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PeerIdentityTest, CertificateWithoutAnyNameIsInvalidArgument) {
  CertificateSpec spec;  // no CN, no SANs
  EXPECT_EQ(IdentityFromCertificatePem(Issue(spec)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedgather
