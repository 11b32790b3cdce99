#include "common/cert_verifier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "common/cert_issuer.h"
#include "common/openssl_util.h"

namespace fedgather {
namespace {

using ::testing::HasSubstr;

constexpr char kIdentity[] = "spiffe://fedgather/site-1";

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime(absl::RFC3339_sec, t, absl::UTCTimeZone());
}

// Times passed to the issuer are kept to the second; round so that messages
// compare exactly.
absl::Time WholeSecond(absl::Time t) {
  return absl::FromUnixSeconds(absl::ToUnixSeconds(t));
}

CertificateSpec ClientSpec(const std::string& name = "site-1") {
  CertificateSpec spec;
  spec.common_name = name;
  spec.uris = {"spiffe://fedgather/" + name};
  spec.client_auth = true;
  return spec;
}

struct CrlFreer {
  void operator()(X509_CRL* p) const { X509_CRL_free(p); }
};
std::unique_ptr<X509_CRL, CrlFreer> ParseCrl(const std::string& pem) {
  OpenSslPtr<BIO> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return std::unique_ptr<X509_CRL, CrlFreer>(
      PEM_read_bio_X509_CRL(bio.get(), nullptr, nullptr, nullptr));
}

long CrlNumber(X509_CRL* crl) {
  ASN1_INTEGER* number = static_cast<ASN1_INTEGER*>(
      X509_CRL_get_ext_d2i(crl, NID_crl_number, nullptr, nullptr));
  if (number == nullptr) return -1;
  const long value = ASN1_INTEGER_get(number);
  ASN1_INTEGER_free(number);
  return value;
}

class CertVerifierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = CreateCertificateAuthority("fedgather CA", absl::Hours(24 * 30));
    auto other = CreateCertificateAuthority("other CA", absl::Hours(24 * 30));
    ASSERT_TRUE(ca.ok()) << ca.status();
    ASSERT_TRUE(other.ok()) << other.status();
    ca_ = *ca;
    other_ca_ = *other;
  }

  KeyAndCert Issue(const CertificateSpec& spec,
                   const KeyAndCert* ca = nullptr) {
    auto leaf = IssueCertificate(ca == nullptr ? ca_ : *ca, spec);
    EXPECT_TRUE(leaf.ok()) << leaf.status();
    return leaf.ok() ? *leaf : KeyAndCert{};
  }

  std::unique_ptr<ClientCertVerifier> Verifier(const std::string& crl = "") {
    auto verifier = ClientCertVerifier::Create(ca_.cert_pem, crl);
    EXPECT_TRUE(verifier.ok()) << verifier.status();
    return verifier.ok() ? *std::move(verifier) : nullptr;
  }

  std::string Crl(const std::vector<std::string>& revoked,
                  const std::string& existing = "",
                  absl::Time this_update = absl::Now() - absl::Minutes(1),
                  absl::Time next_update = absl::Now() + absl::Hours(24)) {
    auto crl = IssueCrl(ca_, revoked, this_update, next_update, existing);
    EXPECT_TRUE(crl.ok()) << crl.status();
    return crl.ok() ? *crl : "";
  }

  // Refusal verifies `cert_pem` and returns the UNAUTHENTICATED message.
  static std::string Refusal(const ClientCertVerifier& verifier,
                             const std::string& cert_pem,
                             absl::Time now = absl::Now()) {
    auto verified = verifier.Verify(cert_pem, "", now);
    EXPECT_FALSE(verified.ok());
    EXPECT_EQ(verified.status().code(), absl::StatusCode::kUnauthenticated)
        << verified.status();
    return std::string(verified.status().message());
  }

  static std::string Serial(const std::string& cert_pem) {
    auto serial = CertificateSerialHex(cert_pem);
    EXPECT_TRUE(serial.ok()) << serial.status();
    return serial.ok() ? *serial : "";
  }

  KeyAndCert ca_;
  KeyAndCert other_ca_;
};

TEST_F(CertVerifierTest, ValidCertificateGivesIdentityAndDetails) {
  CertificateSpec spec = ClientSpec();
  const absl::Time now = WholeSecond(absl::Now());
  spec.not_before = now - absl::Hours(1);
  spec.not_after = now + absl::Hours(1);
  const KeyAndCert leaf = Issue(spec);
  auto verifier = Verifier();
  ASSERT_NE(verifier, nullptr);
  auto verified = verifier->Verify(leaf.cert_pem, "", absl::Now());
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_EQ(verified->identity, kIdentity);
  EXPECT_EQ(verified->serial_hex, Serial(leaf.cert_pem));
  EXPECT_FALSE(verified->serial_hex.empty());
  EXPECT_EQ(verified->subject, "CN=site-1");
  EXPECT_EQ(verified->not_before, spec.not_before);
  EXPECT_EQ(verified->not_after, spec.not_after);
  EXPECT_EQ(verifier->crl_count(), 0);
  EXPECT_EQ(verifier->crl_next_update(), absl::InfiniteFuture());
}

TEST_F(CertVerifierTest, ChainThatRepeatsTheLeafIsAccepted) {
  const KeyAndCert leaf = Issue(ClientSpec());
  auto verifier = Verifier();
  ASSERT_NE(verifier, nullptr);
  auto verified = verifier->Verify(leaf.cert_pem, leaf.cert_pem, absl::Now());
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_EQ(verified->identity, kIdentity);
}

TEST_F(CertVerifierTest, CertificateWithoutEkuIsAccepted) {
  CertificateSpec spec = ClientSpec();
  spec.client_auth = false;  // No extendedKeyUsage at all.
  const KeyAndCert leaf = Issue(spec);
  auto verifier = Verifier();
  ASSERT_NE(verifier, nullptr);
  EXPECT_TRUE(verifier->Verify(leaf.cert_pem, "", absl::Now()).ok());
}

TEST_F(CertVerifierTest, ExpiredCertificateIsRefusedWithDate) {
  CertificateSpec spec = ClientSpec();
  const absl::Time now = WholeSecond(absl::Now());
  spec.not_before = now - absl::Hours(48);
  spec.not_after = now - absl::Hours(24);
  const KeyAndCert leaf = Issue(spec);
  auto verifier = Verifier();
  ASSERT_NE(verifier, nullptr);
  const std::string message = Refusal(*verifier, leaf.cert_pem);
  EXPECT_THAT(message, HasSubstr(absl::StrCat("'", kIdentity, "'")));
  EXPECT_THAT(message, HasSubstr("serial " + Serial(leaf.cert_pem)));
  EXPECT_THAT(message, HasSubstr("expired at " + Rfc3339(spec.not_after)));
}

TEST_F(CertVerifierTest, NotYetValidCertificateIsRefusedWithDate) {
  CertificateSpec spec = ClientSpec();
  const absl::Time now = WholeSecond(absl::Now());
  spec.not_before = now + absl::Hours(1);
  spec.not_after = now + absl::Hours(2);
  const KeyAndCert leaf = Issue(spec);
  auto verifier = Verifier();
  ASSERT_NE(verifier, nullptr);
  const std::string message = Refusal(*verifier, leaf.cert_pem);
  EXPECT_THAT(message, HasSubstr(kIdentity));
  EXPECT_THAT(message,
              HasSubstr("is not valid until " + Rfc3339(spec.not_before)));
}

TEST_F(CertVerifierTest, VerifiesAtTheGivenTime) {
  CertificateSpec spec = ClientSpec();
  const absl::Time now = WholeSecond(absl::Now());
  spec.not_before = now + absl::Minutes(10);
  spec.not_after = now + absl::Hours(1);
  const KeyAndCert leaf = Issue(spec);
  auto verifier = Verifier();
  ASSERT_NE(verifier, nullptr);
  EXPECT_TRUE(
      verifier->Verify(leaf.cert_pem, "", now + absl::Minutes(10)).ok());
  EXPECT_TRUE(
      verifier->Verify(leaf.cert_pem, "", now + absl::Minutes(59)).ok());
  EXPECT_THAT(Refusal(*verifier, leaf.cert_pem, now + absl::Hours(2)),
              HasSubstr("expired at " + Rfc3339(spec.not_after)));
  EXPECT_THAT(Refusal(*verifier, leaf.cert_pem, now + absl::Minutes(5)),
              HasSubstr("is not valid until " + Rfc3339(spec.not_before)));
  // Before the CA's own window (it starts five minutes before its issue),
  // the refusal names the CA.
  EXPECT_THAT(Refusal(*verifier, leaf.cert_pem, now - absl::Hours(1)),
              HasSubstr("chains to CA certificate 'CN=fedgather CA'"));
}

TEST_F(CertVerifierTest, ARememberedCertificateIsRefusedOnceItsChainExpires) {
  // The CA expires long before its leaf: a verification remembered while
  // both were valid does not outlive the CA.
  auto short_ca = CreateCertificateAuthority("short CA", absl::Hours(1));
  ASSERT_TRUE(short_ca.ok()) << short_ca.status();
  CertificateSpec spec = ClientSpec();
  spec.not_after = absl::Now() + absl::Hours(24 * 30);
  const KeyAndCert leaf = Issue(spec, &*short_ca);
  auto verifier = ClientCertVerifier::Create(short_ca->cert_pem, "");
  ASSERT_TRUE(verifier.ok()) << verifier.status();
  const absl::Time now = absl::Now();
  auto first = (*verifier)->Verify(leaf.cert_pem, "", now);
  auto again = (*verifier)->Verify(leaf.cert_pem, "", now + absl::Minutes(30));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->identity, first->identity);
  EXPECT_EQ(again->serial_hex, first->serial_hex);
  EXPECT_THAT(Refusal(**verifier, leaf.cert_pem, now + absl::Hours(2)),
              HasSubstr("chains to CA certificate 'CN=short CA'"));
  EXPECT_THAT(Refusal(**verifier, leaf.cert_pem, now + absl::Hours(2)),
              HasSubstr("which expired at"));
  // A refusal is not remembered: inside the window it is accepted again.
  EXPECT_TRUE((*verifier)->Verify(leaf.cert_pem, "", now).ok());
}

TEST_F(CertVerifierTest, RevokedCertificateIsRefusedOthersAccepted) {
  const KeyAndCert revoked = Issue(ClientSpec());
  const KeyAndCert kept = Issue(ClientSpec("site-2"));
  const absl::Time this_update = WholeSecond(absl::Now() - absl::Minutes(1));
  const absl::Time next_update = this_update + absl::Hours(24);
  auto verifier =
      Verifier(Crl({revoked.cert_pem}, "", this_update, next_update));
  ASSERT_NE(verifier, nullptr);
  EXPECT_EQ(verifier->crl_count(), 1);
  EXPECT_EQ(verifier->crl_next_update(), next_update);
  const std::string serial = Serial(revoked.cert_pem);
  const std::string message = Refusal(*verifier, revoked.cert_pem);
  EXPECT_THAT(message, HasSubstr(kIdentity));
  EXPECT_THAT(message, HasSubstr("was revoked (serial " + serial + ")"));
  EXPECT_THAT(message, HasSubstr("on " + Rfc3339(this_update)));
  auto verified = verifier->Verify(kept.cert_pem, "", absl::Now());
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_EQ(verified->identity, "spiffe://fedgather/site-2");
}

TEST_F(CertVerifierTest, StaleCrlIsStillHonoured) {
  const KeyAndCert revoked = Issue(ClientSpec());
  const KeyAndCert kept = Issue(ClientSpec("site-2"));
  const absl::Time next_update = WholeSecond(absl::Now() - absl::Hours(1));
  auto verifier = Verifier(
      Crl({revoked.cert_pem}, "", next_update - absl::Hours(24), next_update));
  ASSERT_NE(verifier, nullptr);
  EXPECT_EQ(verifier->crl_next_update(), next_update);
  EXPECT_LT(verifier->crl_next_update(), absl::Now());
  EXPECT_THAT(Refusal(*verifier, revoked.cert_pem), HasSubstr("was revoked"));
  EXPECT_TRUE(verifier->Verify(kept.cert_pem, "", absl::Now()).ok());
  // A CRL issued after `now` is honoured too.
  EXPECT_THAT(
      Refusal(*verifier, revoked.cert_pem, next_update - absl::Hours(48)),
      HasSubstr("was revoked"));
}

TEST_F(CertVerifierTest, CaWithoutCrlRevokesNothing) {
  const KeyAndCert revoked = Issue(ClientSpec());
  const KeyAndCert from_other = Issue(ClientSpec("site-9"), &other_ca_);
  auto verifier = ClientCertVerifier::Create(ca_.cert_pem + other_ca_.cert_pem,
                                             Crl({revoked.cert_pem}));
  ASSERT_TRUE(verifier.ok()) << verifier.status();
  EXPECT_THAT(Refusal(**verifier, revoked.cert_pem), HasSubstr("was revoked"));
  auto verified = (*verifier)->Verify(from_other.cert_pem, "", absl::Now());
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_EQ(verified->identity, "spiffe://fedgather/site-9");
}

TEST_F(CertVerifierTest, ForeignCaIsRefusedNamingTheIssuer) {
  const KeyAndCert leaf = Issue(ClientSpec(), &other_ca_);
  auto verifier = Verifier();
  ASSERT_NE(verifier, nullptr);
  const std::string message = Refusal(*verifier, leaf.cert_pem);
  EXPECT_THAT(message, HasSubstr(kIdentity));
  EXPECT_THAT(message, HasSubstr("serial " + Serial(leaf.cert_pem)));
  EXPECT_THAT(message,
              HasSubstr("is not issued by this server's client CA (issuer: "
                        "CN=other CA)"));
  // A CA of the same name with another key (another `fedgather provision`).
  auto namesake = CreateCertificateAuthority("fedgather CA", absl::Hours(1));
  ASSERT_TRUE(namesake.ok());
  EXPECT_THAT(Refusal(*verifier, Issue(ClientSpec(), &*namesake).cert_pem),
              HasSubstr("(issuer: CN=fedgather CA, a different key from this "
                        "server's client CA of that name)"));
  // A foreign chain given as intermediates does not help.
  EXPECT_FALSE(
      verifier->Verify(leaf.cert_pem, other_ca_.cert_pem, absl::Now()).ok());
}

TEST_F(CertVerifierTest, ServerOnlyCertificateIsRefused) {
  CertificateSpec spec = ClientSpec();
  spec.client_auth = false;
  spec.server_auth = true;
  const KeyAndCert leaf = Issue(spec);
  auto verifier = Verifier();
  ASSERT_NE(verifier, nullptr);
  const std::string message = Refusal(*verifier, leaf.cert_pem);
  EXPECT_THAT(message, HasSubstr(kIdentity));
  EXPECT_THAT(message, HasSubstr("is not for client authentication"));
  EXPECT_THAT(message, HasSubstr("clientAuth"));
}

TEST_F(CertVerifierTest, CaCertificateIsNotAClientCertificate) {
  auto verifier = Verifier();
  ASSERT_NE(verifier, nullptr);
  EXPECT_THAT(Refusal(*verifier, ca_.cert_pem),
              HasSubstr("is a CA certificate, not a client certificate"));
}

TEST_F(CertVerifierTest, MissingOrGarbageCertificateIsRefused) {
  auto verifier = Verifier();
  ASSERT_NE(verifier, nullptr);
  EXPECT_EQ(Refusal(*verifier, ""), "no client certificate was presented");
  EXPECT_THAT(Refusal(*verifier, "not a certificate"),
              HasSubstr("does not parse"));
  std::string truncated = Issue(ClientSpec()).cert_pem;
  truncated.erase(truncated.size() / 2, 20);
  EXPECT_THAT(Refusal(*verifier, truncated), HasSubstr("does not parse"));
}

TEST_F(CertVerifierTest, GarbageChainIsRefused) {
  const KeyAndCert leaf = Issue(ClientSpec());
  auto verifier = Verifier();
  ASSERT_NE(verifier, nullptr);
  auto verified = verifier->Verify(
      leaf.cert_pem,
      "-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n",
      absl::Now());
  EXPECT_EQ(verified.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(verified.status().message()),
              HasSubstr("chain that does not parse"));
  EXPECT_THAT(std::string(verified.status().message()), HasSubstr(kIdentity));
}

TEST_F(CertVerifierTest, CertificateWithoutIdentityIsRefused) {
  CertificateSpec spec;
  spec.client_auth = true;
  spec.ip_addresses = {"10.0.0.1"};  // Neither URI, DNS name nor CN.
  const KeyAndCert leaf = Issue(spec);
  auto verifier = Verifier();
  ASSERT_NE(verifier, nullptr);
  const std::string message = Refusal(*verifier, leaf.cert_pem);
  EXPECT_THAT(message, HasSubstr("serial " + Serial(leaf.cert_pem)));
  EXPECT_THAT(message, HasSubstr("carries no usable identity"));
}

TEST_F(CertVerifierTest, CreateRefusesBadCasAndCrls) {
  auto no_ca = ClientCertVerifier::Create("", "");
  EXPECT_EQ(no_ca.status().code(), absl::StatusCode::kInvalidArgument);
  const KeyAndCert leaf = Issue(ClientSpec());
  auto leaf_as_ca = ClientCertVerifier::Create(leaf.cert_pem, "");
  EXPECT_EQ(leaf_as_ca.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(leaf_as_ca.status().message(),
              HasSubstr("not a certificate authority"));
  auto garbage_crl = ClientCertVerifier::Create(ca_.cert_pem, "garbage");
  EXPECT_EQ(garbage_crl.status().code(), absl::StatusCode::kInvalidArgument);
  auto broken_crl = ClientCertVerifier::Create(
      ca_.cert_pem, "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n");
  EXPECT_EQ(broken_crl.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(broken_crl.status().message(), HasSubstr("does not parse"));
}

TEST_F(CertVerifierTest, CreateRefusesCrlOfAnotherCa) {
  const KeyAndCert foreign = Issue(ClientSpec(), &other_ca_);
  auto foreign_crl = IssueCrl(other_ca_, {foreign.cert_pem}, absl::Now(),
                              absl::Now() + absl::Hours(1));
  ASSERT_TRUE(foreign_crl.ok()) << foreign_crl.status();
  auto verifier = ClientCertVerifier::Create(ca_.cert_pem, *foreign_crl);
  EXPECT_EQ(verifier.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(verifier.status().message(),
              HasSubstr("is not signed by any of the client CAs"));
  EXPECT_THAT(verifier.status().message(), HasSubstr("CN=other CA"));
  // One good CRL does not excuse a bad one next to it.
  auto mixed = ClientCertVerifier::Create(ca_.cert_pem, Crl({}) + *foreign_crl);
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mixed.status().message(), HasSubstr("CRL 2"));
  // Both CAs trusted: both CRLs load.
  auto both = ClientCertVerifier::Create(ca_.cert_pem + other_ca_.cert_pem,
                                         Crl({}) + *foreign_crl);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ((*both)->crl_count(), 2);
  EXPECT_THAT(Refusal(**both, foreign.cert_pem), HasSubstr("was revoked"));
}

TEST_F(CertVerifierTest, VerifyIsSafeFromManyThreads) {
  const KeyAndCert good = Issue(ClientSpec());
  const KeyAndCert revoked = Issue(ClientSpec("site-2"));
  auto verifier = Verifier(Crl({revoked.cert_pem}));
  ASSERT_NE(verifier, nullptr);
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const absl::Time now = absl::Now();
        if (!verifier->Verify(good.cert_pem, "", now).ok()) ++failures[t];
        if (verifier->Verify(revoked.cert_pem, "", now).ok()) ++failures[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
}

TEST_F(CertVerifierTest, ClaimedIdentityReadsUnverifiedCertificates) {
  EXPECT_EQ(ClaimedIdentity(Issue(ClientSpec(), &other_ca_).cert_pem),
            kIdentity);
  EXPECT_EQ(ClaimedIdentity(""), "");
  EXPECT_EQ(ClaimedIdentity("garbage"), "");
}

// IssueCrl.

TEST_F(CertVerifierTest, CrlIsV2SignedWithAkidAndNumber) {
  const KeyAndCert leaf = Issue(ClientSpec());
  const absl::Time this_update = WholeSecond(absl::Now());
  const std::string pem =
      Crl({leaf.cert_pem}, "", this_update, this_update + absl::Hours(5));
  EXPECT_TRUE(absl::StartsWith(pem, "-----BEGIN X509 CRL-----"));
  auto crl = ParseCrl(pem);
  ASSERT_NE(crl, nullptr);
  EXPECT_EQ(X509_CRL_get_version(crl.get()), X509_CRL_VERSION_2);
  EXPECT_EQ(X509_CRL_get_signature_nid(crl.get()), NID_ecdsa_with_SHA256);
  auto ca_cert = ParseCertificatePem(ca_.cert_pem);
  ASSERT_TRUE(ca_cert.ok());
  EXPECT_EQ(X509_CRL_verify(crl.get(), X509_get0_pubkey(ca_cert->get())), 1);
  EXPECT_EQ(X509_NAME_cmp(X509_CRL_get_issuer(crl.get()),
                          X509_get_subject_name(ca_cert->get())),
            0);
  EXPECT_GE(
      X509_CRL_get_ext_by_NID(crl.get(), NID_authority_key_identifier, -1), 0);
  EXPECT_EQ(CrlNumber(crl.get()), 1);
  EXPECT_EQ(ASN1_TIME_cmp_time_t(X509_CRL_get0_lastUpdate(crl.get()),
                                 absl::ToTimeT(this_update)),
            0);
  EXPECT_EQ(ASN1_TIME_cmp_time_t(X509_CRL_get0_nextUpdate(crl.get()),
                                 absl::ToTimeT(this_update + absl::Hours(5))),
            0);
  auto serials = CrlSerialsHex(pem);
  ASSERT_TRUE(serials.ok()) << serials.status();
  EXPECT_EQ(*serials, std::vector<std::string>{Serial(leaf.cert_pem)});
}

TEST_F(CertVerifierTest, MergingKeepsOldEntriesAndBumpsTheNumber) {
  const KeyAndCert first = Issue(ClientSpec());
  const KeyAndCert second = Issue(ClientSpec("site-2"));
  const KeyAndCert third = Issue(ClientSpec("site-3"));
  const absl::Time earlier = WholeSecond(absl::Now() - absl::Hours(2));
  const std::string crl1 =
      Crl({first.cert_pem}, "", earlier, earlier + absl::Hours(24));
  // `first` again is not listed twice and keeps its first date.
  const std::string crl2 = Crl({second.cert_pem, first.cert_pem}, crl1);
  auto serials = CrlSerialsHex(crl2);
  ASSERT_TRUE(serials.ok()) << serials.status();
  EXPECT_EQ(serials->size(), 2u);
  EXPECT_NE(std::find(serials->begin(), serials->end(), Serial(first.cert_pem)),
            serials->end());
  EXPECT_NE(
      std::find(serials->begin(), serials->end(), Serial(second.cert_pem)),
      serials->end());
  auto parsed1 = ParseCrl(crl1);
  auto parsed2 = ParseCrl(crl2);
  ASSERT_NE(parsed2, nullptr);
  EXPECT_EQ(CrlNumber(parsed1.get()), 1);
  EXPECT_EQ(CrlNumber(parsed2.get()), 2);

  auto verifier = Verifier(crl2);
  ASSERT_NE(verifier, nullptr);
  EXPECT_THAT(Refusal(*verifier, first.cert_pem),
              HasSubstr("on " + Rfc3339(earlier)));
  EXPECT_THAT(Refusal(*verifier, second.cert_pem), HasSubstr("was revoked"));
  EXPECT_TRUE(verifier->Verify(third.cert_pem, "", absl::Now()).ok());

  // An empty revocation list still renews the CRL with its entries.
  const std::string crl3 = Crl({}, crl2);
  auto serials3 = CrlSerialsHex(crl3);
  ASSERT_TRUE(serials3.ok());
  EXPECT_EQ(serials3->size(), 2u);
  EXPECT_EQ(CrlNumber(ParseCrl(crl3).get()), 3);
}

TEST_F(CertVerifierTest, IssueCrlRejectsBadArguments) {
  const KeyAndCert foreign = Issue(ClientSpec(), &other_ca_);
  const absl::Time now = absl::Now();
  auto wrong_issuer =
      IssueCrl(ca_, {foreign.cert_pem}, now, now + absl::Hours(1));
  EXPECT_EQ(wrong_issuer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong_issuer.status().message(), HasSubstr("not issued by"));
  auto itself = IssueCrl(ca_, {ca_.cert_pem}, now, now + absl::Hours(1));
  EXPECT_EQ(itself.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(itself.status().message()),
              HasSubstr("the CA certificate itself"));
  auto garbage = IssueCrl(ca_, {"garbage"}, now, now + absl::Hours(1));
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument);
  auto backwards = IssueCrl(ca_, {}, now, now - absl::Hours(1));
  EXPECT_EQ(backwards.status().code(), absl::StatusCode::kInvalidArgument);
  auto foreign_crl = IssueCrl(other_ca_, {}, now, now + absl::Hours(1));
  ASSERT_TRUE(foreign_crl.ok()) << foreign_crl.status();
  auto wrong_base = IssueCrl(ca_, {}, now, now + absl::Hours(1), *foreign_crl);
  EXPECT_EQ(wrong_base.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong_base.status().message(), HasSubstr("not signed by"));
  auto bad_base = IssueCrl(ca_, {}, now, now + absl::Hours(1), "garbage");
  EXPECT_EQ(bad_base.status().code(), absl::StatusCode::kInvalidArgument);
  KeyAndCert mismatched = ca_;
  mismatched.key_pem = other_ca_.key_pem;
  EXPECT_EQ(IssueCrl(mismatched, {}, now, now + absl::Hours(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CertificateSerialHex("garbage").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CrlSerialsHex("garbage").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedgather
