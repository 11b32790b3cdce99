#include "common/peer_identity.h"

#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/cert_issuer.h"
#include "common/openssl_util.h"

namespace fedgather {
namespace {

class PeerIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = CreateCertificateAuthority("issuer CN", absl::Hours(1));
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = *std::move(ca);
  }

  std::string Issue(const CertificateSpec& spec) {
    auto leaf = IssueCertificate(ca_, spec);
    EXPECT_TRUE(leaf.ok()) << leaf.status();
    return leaf.ok() ? leaf->cert_pem : "";
  }

  KeyAndCert ca_;
};

// RawCertificate builds a self-signed certificate with OpenSSL directly, for
// contents that IssueCertificate refuses to make: `cns` as subject CNs and
// `sans` as (type, raw value) SAN entries.
std::string RawCertificate(
    const std::vector<std::string>& cns,
    const std::vector<std::pair<int, std::string>>& sans) {
  OpenSslPtr<EVP_PKEY> key(EVP_EC_gen("P-256"));
  OpenSslPtr<X509> cert(X509_new());
  EXPECT_TRUE(key != nullptr && cert != nullptr);
  X509_set_version(cert.get(), X509_VERSION_3);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 3600);
  X509_NAME* name = X509_get_subject_name(cert.get());
  for (const std::string& cn : cns) {
    EXPECT_EQ(X509_NAME_add_entry_by_txt(
                  name, "CN", MBSTRING_UTF8,
                  reinterpret_cast<const unsigned char*>(cn.data()),
                  static_cast<int>(cn.size()), -1, 0),
              1);
  }
  X509_set_issuer_name(cert.get(), name);
  X509_set_pubkey(cert.get(), key.get());
  if (!sans.empty()) {
    OpenSslPtr<GENERAL_NAMES> names(sk_GENERAL_NAME_new_null());
    for (const auto& [type, value] : sans) {
      ASN1_IA5STRING* text = ASN1_IA5STRING_new();
      ASN1_STRING_set(text, value.data(), static_cast<int>(value.size()));
      GENERAL_NAME* general = GENERAL_NAME_new();
      GENERAL_NAME_set0_value(general, type, text);
      sk_GENERAL_NAME_push(names.get(), general);
    }
    EXPECT_EQ(X509_add1_ext_i2d(cert.get(), NID_subject_alt_name, names.get(),
                                0, X509V3_ADD_DEFAULT),
              1);
  }
  EXPECT_GT(X509_sign(cert.get(), key.get(), EVP_sha256()), 0);
  OpenSslPtr<BIO> bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), cert.get());
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

absl::StatusCode Code(absl::string_view pem) {
  return IdentityFromCertificatePem(pem).status().code();
}

TEST_F(PeerIdentityTest, UriWinsOverDnsWhichWinsOverCn) {
  CertificateSpec spec;
  spec.common_name = "cn-name";
  spec.dns_names = {"dns.example", "second.example"};
  spec.ip_addresses = {"10.0.0.1"};
  spec.uris = {"spiffe://fedgather/site-9", "spiffe://other"};
  EXPECT_EQ(IdentityFromCertificatePem(Issue(spec)).value(),
            "spiffe://fedgather/site-9");
  spec.uris.clear();
  EXPECT_EQ(IdentityFromCertificatePem(Issue(spec)).value(), "dns.example");
  spec.dns_names.clear();
  // An IP SAN is never an identity: the CN is next.
  EXPECT_EQ(IdentityFromCertificatePem(Issue(spec)).value(), "cn-name");
  spec.ip_addresses.clear();
  EXPECT_EQ(IdentityFromCertificatePem(Issue(spec)).value(), "cn-name");
}

TEST_F(PeerIdentityTest, ReadsTheLeafOfAChain) {
  CertificateSpec spec;
  spec.uris = {"spiffe://fedgather/leaf"};
  EXPECT_EQ(IdentityFromCertificatePem(Issue(spec) + ca_.cert_pem).value(),
            "spiffe://fedgather/leaf");
}

TEST_F(PeerIdentityTest, GarbageIsInvalidArgument) {
  EXPECT_EQ(Code("-----BEGIN CERTIFICATE-----\nzz\n-----END CERTIFICATE-----"),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code("-----BEGIN CERTIFICATE-----\nzz\n"),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(""), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code("hello"), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(ca_.key_pem), absl::StatusCode::kInvalidArgument);
}

TEST_F(PeerIdentityTest, NoNameIsInvalidArgumentEvenWhenTheIssuerHasOne) {
  CertificateSpec spec;  // No CN, no SANs; the issuer's CN must not be used.
  EXPECT_EQ(Code(Issue(spec)), absl::StatusCode::kInvalidArgument);
  spec.ip_addresses = {"127.0.0.1"};
  EXPECT_EQ(Code(Issue(spec)), absl::StatusCode::kInvalidArgument);
}

TEST_F(PeerIdentityTest, UnusableFirstChoiceIsRefusedNotSkipped) {
  // The raw builder itself works.
  EXPECT_EQ(IdentityFromCertificatePem(
                RawCertificate({"cn"}, {{GEN_URI, "spiffe://fedgather/r"}}))
                .value(),
            "spiffe://fedgather/r");
  // An empty first URI is refused even though a DNS name and CN follow.
  EXPECT_EQ(Code(RawCertificate({"cn"}, {{GEN_URI, ""}, {GEN_DNS, "d"}})),
            absl::StatusCode::kInvalidArgument);
  // A NUL could make "site-1\0.evil" compare as "site-1" in C strings.
  EXPECT_EQ(
      Code(RawCertificate(
          {}, {{GEN_URI, std::string("spiffe://fedgather/a") + '\0' + "b"}})),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(RawCertificate({}, {{GEN_DNS, "line\nbreak"}})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(RawCertificate({"a", "b"}, {})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(IdentityFromCertificatePem(RawCertificate({"only"}, {})).value(),
            "only");
}

}  // namespace
}  // namespace fedgather
