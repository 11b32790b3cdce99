#include "common/cert_issuer.h"

#include <gtest/gtest.h>
#include <openssl/asn1.h>
#include <openssl/bn.h>
#include <openssl/pem.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/openssl_util.h"
#include "tests/common/x509_test_util.h"

namespace fedgather {
namespace {

using x509_test::ParseCert;
using x509_test::ParseKey;
using x509_test::Sans;
using x509_test::VerifyError;

bool Verifies(const std::string& ca_pem, const std::string& leaf_pem,
              int purpose = 0) {
  return VerifyError(ca_pem, leaf_pem, purpose) == X509_V_OK;
}

bool IsCritical(X509* cert, int nid) {
  const int index = X509_get_ext_by_NID(cert, nid, -1);
  return index >= 0 &&
         X509_EXTENSION_get_critical(X509_get_ext(cert, index)) == 1;
}

absl::Time AsTime(const ASN1_TIME* t) {
  struct tm tm = {};
  EXPECT_EQ(ASN1_TIME_to_tm(t, &tm), 1);
  return absl::FromTimeT(timegm(&tm));
}

std::string CommonName(X509* cert) {
  char buffer[256] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, buffer,
                            sizeof(buffer));
  return buffer;
}

absl::StatusCode IssueCode(const KeyAndCert& ca, const CertificateSpec& spec) {
  return IssueCertificate(ca, spec).status().code();
}

TEST(CertIssuerTest, CaIsSelfSignedCertificateAuthority) {
  const absl::Time before = absl::Now();
  auto ca = CreateCertificateAuthority("test CA", absl::Hours(3));
  ASSERT_TRUE(ca.ok()) << ca.status();
  OpenSslPtr<X509> cert = ParseCert(ca->cert_pem);
  ASSERT_NE(cert, nullptr);
  EXPECT_EQ(X509_check_ca(cert.get()), 1);
  EXPECT_TRUE(IsCritical(cert.get(), NID_basic_constraints));
  EXPECT_TRUE(IsCritical(cert.get(), NID_key_usage));
  EXPECT_EQ(X509_get_key_usage(cert.get()), KU_KEY_CERT_SIGN | KU_CRL_SIGN);
  EXPECT_NE(X509_get0_subject_key_id(cert.get()), nullptr);
  EXPECT_EQ(X509_get_version(cert.get()), X509_VERSION_3);
  EXPECT_EQ(CommonName(cert.get()), "test CA");

  // Self-signed: issuer is subject, and the signature verifies with its own
  // key, which is the key returned with it.
  EXPECT_EQ(X509_NAME_cmp(X509_get_issuer_name(cert.get()),
                          X509_get_subject_name(cert.get())),
            0);
  EXPECT_EQ(X509_verify(cert.get(), X509_get0_pubkey(cert.get())), 1);
  EXPECT_EQ(X509_get_signature_nid(cert.get()), NID_ecdsa_with_SHA256);
  EXPECT_TRUE(Verifies(ca->cert_pem, ca->cert_pem));
  EXPECT_NE(ca->key_pem.find("-----BEGIN PRIVATE KEY-----"), std::string::npos);
  OpenSslPtr<EVP_PKEY> key = ParseKey(ca->key_pem);
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(X509_check_private_key(cert.get(), key.get()), 1);
  EXPECT_TRUE(EVP_PKEY_is_a(key.get(), "EC"));
  EXPECT_EQ(EVP_PKEY_get_bits(key.get()), 256);

  // Valid from five minutes before issue for the given three hours.
  const absl::Time not_before = AsTime(X509_get0_notBefore(cert.get()));
  const absl::Time not_after = AsTime(X509_get0_notAfter(cert.get()));
  EXPECT_GE(not_before, before - absl::Minutes(5) - absl::Seconds(1));
  EXPECT_LE(not_before, absl::Now() - absl::Minutes(5));
  EXPECT_GE(not_after, before + absl::Hours(3) - absl::Seconds(1));
  EXPECT_LE(not_after, absl::Now() + absl::Hours(3));
}

TEST(CertIssuerTest, CaRejectsBadArguments) {
  EXPECT_EQ(CreateCertificateAuthority("", absl::Hours(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      CreateCertificateAuthority("CA", absl::ZeroDuration()).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateCertificateAuthority("CA", -absl::Hours(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateCertificateAuthority("C\nA", absl::Hours(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CertIssuerTest, LeafVerifiesAgainstItsCaOnlyAndCarriesItsSans) {
  auto ca = CreateCertificateAuthority("CA one", absl::Hours(1));
  auto other = CreateCertificateAuthority("CA two", absl::Hours(1));
  ASSERT_TRUE(ca.ok() && other.ok());
  CertificateSpec spec;
  spec.common_name = "server";
  spec.dns_names = {"localhost", "fedgather.example"};
  spec.ip_addresses = {"127.0.0.1", "::1"};
  spec.uris = {"spiffe://fedgather/x", "spiffe://fedgather/a,b"};
  spec.server_auth = true;
  auto leaf = IssueCertificate(*ca, spec);
  ASSERT_TRUE(leaf.ok()) << leaf.status();

  EXPECT_EQ(VerifyError(ca->cert_pem, leaf->cert_pem), X509_V_OK);
  EXPECT_EQ(VerifyError(other->cert_pem, leaf->cert_pem),
            X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY);

  OpenSslPtr<X509> cert = ParseCert(leaf->cert_pem);
  ASSERT_NE(cert, nullptr);
  EXPECT_EQ(CommonName(cert.get()), "server");
  EXPECT_EQ(X509_check_ca(cert.get()), 0);
  EXPECT_TRUE(IsCritical(cert.get(), NID_basic_constraints));
  EXPECT_EQ(X509_get_key_usage(cert.get()),
            KU_DIGITAL_SIGNATURE | KU_KEY_ENCIPHERMENT);
  EXPECT_EQ(X509_get_extended_key_usage(cert.get()), XKU_SSL_SERVER);
  EXPECT_EQ(X509_get_signature_nid(cert.get()), NID_ecdsa_with_SHA256);
  EXPECT_EQ(Sans(cert.get(), GEN_DNS),
            (std::vector<std::string>{"localhost", "fedgather.example"}));
  EXPECT_EQ(Sans(cert.get(), GEN_URI),
            (std::vector<std::string>{"spiffe://fedgather/x",
                                      "spiffe://fedgather/a,b"}));
  EXPECT_EQ(Sans(cert.get(), GEN_IPADD),
            (std::vector<std::string>{
                std::string("\x7f\x00\x00\x01", 4),
                std::string("\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x01", 16)}));
  EXPECT_EQ(X509_check_host(cert.get(), "localhost", 0, 0, nullptr), 1);
  EXPECT_EQ(X509_check_ip_asc(cert.get(), "127.0.0.1", 0), 1);
  EXPECT_EQ(X509_check_ip_asc(cert.get(), "::1", 0), 1);
  EXPECT_EQ(X509_check_ip_asc(cert.get(), "127.0.0.2", 0), 0);

  // The authority key id names the CA's subject key id.
  OpenSslPtr<X509> ca_cert = ParseCert(ca->cert_pem);
  const ASN1_OCTET_STRING* akid = X509_get0_authority_key_id(cert.get());
  ASSERT_NE(akid, nullptr);
  EXPECT_EQ(
      ASN1_OCTET_STRING_cmp(akid, X509_get0_subject_key_id(ca_cert.get())), 0);
  EXPECT_NE(X509_get0_subject_key_id(cert.get()), nullptr);

  // The returned key is the certificate's, EC P-256, PKCS#8.
  EXPECT_NE(leaf->key_pem.find("-----BEGIN PRIVATE KEY-----"),
            std::string::npos);
  OpenSslPtr<EVP_PKEY> key = ParseKey(leaf->key_pem);
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(X509_check_private_key(cert.get(), key.get()), 1);
  EXPECT_EQ(EVP_PKEY_get_bits(key.get()), 256);
}

TEST(CertIssuerTest, ExtendedKeyUsageFollowsSpec) {
  auto ca = CreateCertificateAuthority("CA", absl::Hours(1));
  ASSERT_TRUE(ca.ok());
  CertificateSpec spec;
  spec.common_name = "site";
  spec.uris = {"spiffe://fedgather/site"};

  spec.client_auth = true;
  auto client = IssueCertificate(*ca, spec);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ(X509_get_extended_key_usage(ParseCert(client->cert_pem).get()),
            XKU_SSL_CLIENT);
  EXPECT_TRUE(
      Verifies(ca->cert_pem, client->cert_pem, X509_PURPOSE_SSL_CLIENT));
  EXPECT_EQ(
      VerifyError(ca->cert_pem, client->cert_pem, X509_PURPOSE_SSL_SERVER),
      X509_V_ERR_INVALID_PURPOSE);

  spec.server_auth = true;
  auto both = IssueCertificate(*ca, spec);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(X509_get_extended_key_usage(ParseCert(both->cert_pem).get()),
            XKU_SSL_CLIENT | XKU_SSL_SERVER);
  EXPECT_TRUE(Verifies(ca->cert_pem, both->cert_pem, X509_PURPOSE_SSL_CLIENT));
  EXPECT_TRUE(Verifies(ca->cert_pem, both->cert_pem, X509_PURPOSE_SSL_SERVER));

  spec.server_auth = spec.client_auth = false;
  auto neither = IssueCertificate(*ca, spec);
  ASSERT_TRUE(neither.ok()) << neither.status();
  OpenSslPtr<X509> cert = ParseCert(neither->cert_pem);
  EXPECT_LT(X509_get_ext_by_NID(cert.get(), NID_ext_key_usage, -1), 0);
}

TEST(CertIssuerTest, SerialsAreRandomPositiveAndAtMost128Bits) {
  auto ca = CreateCertificateAuthority("CA", absl::Hours(1));
  ASSERT_TRUE(ca.ok());
  CertificateSpec spec;
  spec.common_name = "x";
  std::vector<OpenSslPtr<BIGNUM>> serials;
  for (int i = 0; i < 4; ++i) {
    auto leaf = IssueCertificate(*ca, spec);
    ASSERT_TRUE(leaf.ok()) << leaf.status();
    OpenSslPtr<X509> cert = ParseCert(leaf->cert_pem);
    OpenSslPtr<BIGNUM> serial(
        ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert.get()), nullptr));
    ASSERT_NE(serial, nullptr);
    EXPECT_FALSE(BN_is_negative(serial.get()));
    EXPECT_FALSE(BN_is_zero(serial.get()));
    EXPECT_LE(BN_num_bits(serial.get()), 128);
    for (const auto& seen : serials) {
      EXPECT_NE(BN_cmp(seen.get(), serial.get()), 0);
    }
    serials.push_back(std::move(serial));
  }
}

TEST(CertIssuerTest, RejectsBadSpecs) {
  auto ca = CreateCertificateAuthority("CA", absl::Hours(1));
  ASSERT_TRUE(ca.ok());
  for (const char* ip : {"300.1.2.3", "localhost", "", "10.0.0.1/8", "::g"}) {
    CertificateSpec spec;
    spec.common_name = "x";
    spec.ip_addresses = {ip};
    EXPECT_EQ(IssueCode(*ca, spec), absl::StatusCode::kInvalidArgument) << ip;
  }
  for (const char* name : {"", "has space", "tab\there", "caf\xc3\xa9"}) {
    CertificateSpec spec;
    spec.dns_names = {name};
    EXPECT_EQ(IssueCode(*ca, spec), absl::StatusCode::kInvalidArgument) << name;
    spec.dns_names.clear();
    spec.uris = {name};
    EXPECT_EQ(IssueCode(*ca, spec), absl::StatusCode::kInvalidArgument) << name;
  }
  CertificateSpec spec;
  spec.common_name = std::string(65, 'c');
  EXPECT_EQ(IssueCode(*ca, spec), absl::StatusCode::kInvalidArgument);
  spec.common_name = std::string(64, 'c');
  EXPECT_EQ(IssueCode(*ca, spec), absl::StatusCode::kOk);
  spec.common_name = "line\nbreak";
  EXPECT_EQ(IssueCode(*ca, spec), absl::StatusCode::kInvalidArgument);
}

TEST(CertIssuerTest, RejectsBadCa) {
  auto ca = CreateCertificateAuthority("CA", absl::Hours(1));
  auto other = CreateCertificateAuthority("other", absl::Hours(1));
  ASSERT_TRUE(ca.ok() && other.ok());
  CertificateSpec spec;
  spec.common_name = "x";
  auto leaf = IssueCertificate(*ca, spec);
  ASSERT_TRUE(leaf.ok());

  const KeyAndCert bad_cert{ca->key_pem, "not a certificate"};
  const KeyAndCert bad_key{"not a key", ca->cert_pem};
  const KeyAndCert mismatched{other->key_pem, ca->cert_pem};
  const KeyAndCert not_a_ca = *leaf;
  for (const KeyAndCert* bad : {&bad_cert, &bad_key, &mismatched, &not_a_ca}) {
    auto issued = IssueCertificate(*bad, spec);
    EXPECT_EQ(issued.status().code(), absl::StatusCode::kInvalidArgument)
        << issued.status();
  }
}

TEST(CertIssuerTest, DefaultWindowIsFiveMinutesBackToAYearAhead) {
  auto ca = CreateCertificateAuthority("CA", absl::Hours(24 * 400));
  ASSERT_TRUE(ca.ok());
  const absl::Time before = absl::Now();
  CertificateSpec spec;
  spec.common_name = "x";
  auto leaf = IssueCertificate(*ca, spec);
  const absl::Time after = absl::Now();
  ASSERT_TRUE(leaf.ok());
  OpenSslPtr<X509> cert = ParseCert(leaf->cert_pem);
  const absl::Time not_before = AsTime(X509_get0_notBefore(cert.get()));
  const absl::Time not_after = AsTime(X509_get0_notAfter(cert.get()));
  EXPECT_GE(not_before, before - kDefaultBackdate - absl::Seconds(1));
  EXPECT_LE(not_before, after - kDefaultBackdate);
  EXPECT_GE(not_after, before + kDefaultLeafValidity - absl::Seconds(1));
  EXPECT_LE(not_after, after + kDefaultLeafValidity);
  EXPECT_TRUE(Verifies(ca->cert_pem, leaf->cert_pem));
}

TEST(CertIssuerTest, HonoursGivenWindow) {
  auto ca = CreateCertificateAuthority("CA", absl::Hours(1));
  ASSERT_TRUE(ca.ok());
  const absl::Time now = absl::FromTimeT(absl::ToTimeT(absl::Now()));

  CertificateSpec spec;
  spec.common_name = "expired";
  spec.not_before = now - absl::Hours(2);
  spec.not_after = now - absl::Hours(1);
  auto expired = IssueCertificate(*ca, spec);
  ASSERT_TRUE(expired.ok()) << expired.status();
  OpenSslPtr<X509> cert = ParseCert(expired->cert_pem);
  EXPECT_EQ(AsTime(X509_get0_notBefore(cert.get())), spec.not_before);
  EXPECT_EQ(AsTime(X509_get0_notAfter(cert.get())), spec.not_after);
  EXPECT_LT(X509_cmp_current_time(X509_get0_notAfter(cert.get())), 0);
  EXPECT_EQ(VerifyError(ca->cert_pem, expired->cert_pem),
            X509_V_ERR_CERT_HAS_EXPIRED);

  spec.common_name = "future";
  spec.not_before = now + absl::Minutes(30);
  spec.not_after = now + absl::Minutes(50);
  auto future = IssueCertificate(*ca, spec);
  ASSERT_TRUE(future.ok()) << future.status();
  cert = ParseCert(future->cert_pem);
  EXPECT_GT(X509_cmp_current_time(X509_get0_notBefore(cert.get())), 0);
  EXPECT_EQ(VerifyError(ca->cert_pem, future->cert_pem),
            X509_V_ERR_CERT_NOT_YET_VALID);

  spec.not_after = spec.not_before;
  EXPECT_EQ(IssueCode(*ca, spec), absl::StatusCode::kInvalidArgument);
  spec.not_after = spec.not_before - absl::Seconds(1);
  EXPECT_EQ(IssueCode(*ca, spec), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedgather
