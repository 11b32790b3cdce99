#include "common/cert_issuer.h"

#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "common/openssl_util.h"

namespace fedgather {
namespace {

OpenSslPtr<X509> Parse(const std::string& pem) {
  auto cert = ParseCertificatePem(pem);
  EXPECT_TRUE(cert.ok()) << cert.status();
  return cert.ok() ? *std::move(cert) : nullptr;
}

// Verifies `leaf` against the single trusted `ca`.
bool Verifies(const std::string& ca_pem, const std::string& leaf_pem) {
  OpenSslPtr<X509> ca = Parse(ca_pem);
  OpenSslPtr<X509> leaf = Parse(leaf_pem);
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca.get());
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf.get(), nullptr);
  const bool ok = X509_verify_cert(ctx) == 1;
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  return ok;
}

std::vector<std::string> Sans(X509* cert, int type) {
  std::vector<std::string> out;
  auto* names = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names); ++i) {
    GENERAL_NAME* name = sk_GENERAL_NAME_value(names, i);
    if (name->type != type) continue;
    ASN1_STRING* s = type == GEN_IPADD ? name->d.iPAddress : name->d.ia5;
    out.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                     ASN1_STRING_length(s));
  }
  GENERAL_NAMES_free(names);
  return out;
}

TEST(CertIssuerTest, CaIsSelfSignedCertificateAuthority) {
  auto ca = CreateCertificateAuthority("test CA", absl::Hours(1));
  ASSERT_TRUE(ca.ok()) << ca.status();
  OpenSslPtr<X509> cert = Parse(ca->cert_pem);
  EXPECT_EQ(X509_check_ca(cert.get()), 1);
  EXPECT_EQ(X509_verify(cert.get(), X509_get0_pubkey(cert.get())), 1);
  EXPECT_NE(ca->key_pem.find("BEGIN PRIVATE KEY"), std::string::npos);
}

TEST(CertIssuerTest, LeafVerifiesAgainstItsCaOnlyAndCarriesItsSans) {
  auto ca = CreateCertificateAuthority("CA one", absl::Hours(1));
  auto other = CreateCertificateAuthority("CA two", absl::Hours(1));
  ASSERT_TRUE(ca.ok() && other.ok());
  CertificateSpec spec;
  spec.common_name = "server";
  spec.dns_names = {"localhost"};
  spec.ip_addresses = {"127.0.0.1"};
  spec.uris = {"spiffe://fedgather/x"};
  spec.server_auth = true;
  auto leaf = IssueCertificate(*ca, spec);
  ASSERT_TRUE(leaf.ok()) << leaf.status();
  EXPECT_TRUE(Verifies(ca->cert_pem, leaf->cert_pem));
  EXPECT_FALSE(Verifies(other->cert_pem, leaf->cert_pem));
  OpenSslPtr<X509> cert = Parse(leaf->cert_pem);
  EXPECT_EQ(X509_check_ca(cert.get()), 0);
  EXPECT_EQ(Sans(cert.get(), GEN_DNS), std::vector<std::string>{"localhost"});
  EXPECT_EQ(Sans(cert.get(), GEN_URI),
            std::vector<std::string>{"spiffe://fedgather/x"});
  EXPECT_EQ(Sans(cert.get(), GEN_IPADD),
            std::vector<std::string>{std::string("\x7f\x00\x00\x01", 4)});
  EXPECT_EQ(X509_check_host(cert.get(), "localhost", 0, 0, nullptr), 1);
}

TEST(CertIssuerTest, RejectsBadIpAndBadCa) {
  auto ca = CreateCertificateAuthority("CA", absl::Hours(1));
  ASSERT_TRUE(ca.ok());
  CertificateSpec spec;
  spec.common_name = "x";
  spec.ip_addresses = {"300.1.2.3"};
  EXPECT_EQ(IssueCertificate(*ca, spec).status().code(),
            absl::StatusCode::kInvalidArgument);
  spec.ip_addresses.clear();
  KeyAndCert broken{ca->key_pem, "not a certificate"};
  EXPECT_EQ(IssueCertificate(broken, spec).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CertIssuerTest, HonoursValidityWindow) {
  auto ca = CreateCertificateAuthority("CA", absl::Hours(1));
  ASSERT_TRUE(ca.ok());
  CertificateSpec spec;
  spec.common_name = "expired";
  spec.not_before = absl::Now() - absl::Hours(2);
  spec.not_after = absl::Now() - absl::Hours(1);
  auto leaf = IssueCertificate(*ca, spec);
  ASSERT_TRUE(leaf.ok());
  OpenSslPtr<X509> cert = Parse(leaf->cert_pem);
  EXPECT_LT(X509_cmp_current_time(X509_get0_notAfter(cert.get())), 0);
  EXPECT_FALSE(Verifies(ca->cert_pem, leaf->cert_pem));
}

}  // namespace
}  // namespace fedgather
