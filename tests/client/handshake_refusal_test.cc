// ExplainHandshakeRefusal on statuses as gRPC 1.51 reports them, with
// certificates made by common/cert_issuer.h. The same explanations over real
// TLS are in tests/e2e/access_e2e_test.cc (CertificateTest.*).
#include "client/handshake_refusal.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "common/cert_issuer.h"

namespace fedgather {
namespace {

using ::testing::HasSubstr;

constexpr char kAddress[] = "127.0.0.1:50051";
// What a call gets when the server closed the connection in the handshake.
constexpr char kClosed[] =
    "failed to connect to all addresses; last error: UNAVAILABLE: "
    "ipv4:127.0.0.1:50051: Socket closed";
constexpr char kRefused[] =
    "failed to connect to all addresses; last error: UNKNOWN: "
    "ipv4:127.0.0.1:50051: Failed to connect to remote host: Connection "
    "refused";

class HandshakeRefusalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<KeyAndCert> ca =
        CreateCertificateAuthority("fedgather CA", absl::Hours(1));
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = *ca;
    auto verifier =
        ClientCertVerifier::Create(ca_.cert_pem, "", "the CA in ca.pem");
    ASSERT_TRUE(verifier.ok()) << verifier.status();
    own_ca_ = *std::move(verifier);
  }

  std::string Issue(bool client_auth, absl::Time not_before,
                    absl::Time not_after) {
    CertificateSpec spec;
    spec.common_name = "site-1";
    spec.uris = {"spiffe://fedgather/site-1"};
    spec.client_auth = client_auth;
    spec.server_auth = !client_auth;
    spec.not_before = not_before;
    spec.not_after = not_after;
    absl::StatusOr<KeyAndCert> issued = IssueCertificate(ca_, spec);
    EXPECT_TRUE(issued.ok()) << issued.status();
    return issued.ok() ? issued->cert_pem : "";
  }
  std::string Good() {
    return Issue(true, absl::InfinitePast(), absl::InfiniteFuture());
  }

  grpc::Status Explain(const grpc::Status& status,
                       const std::string& cert_pem) {
    return ExplainHandshakeRefusal(status, kAddress, own_ca_.get(), cert_pem,
                                   absl::Now());
  }

  KeyAndCert ca_;
  std::unique_ptr<ClientCertVerifier> own_ca_;
};

TEST_F(HandshakeRefusalTest, ACertificateTheHandshakeRefusesIsUnauthenticated) {
  const absl::Time now = absl::Now();
  const struct {
    std::string cert_pem;
    std::string why;
  } cases[] = {
      {Issue(true, now - absl::Hours(48), now - absl::Hours(24)), "expired at"},
      {Issue(true, now + absl::Hours(24), now + absl::Hours(48)),
       "is not valid until"},
      {Issue(false, absl::InfinitePast(), absl::InfiniteFuture()),
       "is not for client authentication"},
      {"", "no client certificate was presented"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.why);
    for (const char* message : {kClosed, kRefused}) {
      const grpc::Status explained = Explain(
          grpc::Status(grpc::StatusCode::UNAVAILABLE, message), c.cert_pem);
      EXPECT_EQ(explained.error_code(), grpc::StatusCode::UNAUTHENTICATED);
      EXPECT_THAT(explained.error_message(),
                  HasSubstr("this client's certificate cannot pass the TLS "
                            "handshake of the server at 127.0.0.1:50051"));
      EXPECT_THAT(explained.error_message(), HasSubstr(c.why));
      // What gRPC said is kept.
      EXPECT_THAT(explained.error_message(), HasSubstr(message));
    }
  }
  // Another CA's certificate, named as such.
  absl::StatusOr<KeyAndCert> other =
      CreateCertificateAuthority("other CA", absl::Hours(1));
  ASSERT_TRUE(other.ok());
  CertificateSpec spec;
  spec.common_name = "site-1";
  spec.client_auth = true;
  absl::StatusOr<KeyAndCert> foreign = IssueCertificate(*other, spec);
  ASSERT_TRUE(foreign.ok());
  EXPECT_THAT(
      Explain(grpc::Status(grpc::StatusCode::UNAVAILABLE, kClosed),
              foreign->cert_pem)
          .error_message(),
      HasSubstr("is not issued by the CA in ca.pem (issuer: CN=other CA)"));
}

TEST_F(HandshakeRefusalTest, AGoodCertificateStaysUnavailableWithAHint) {
  const std::string good = Good();
  const grpc::Status closed =
      Explain(grpc::Status(grpc::StatusCode::UNAVAILABLE, kClosed), good);
  EXPECT_EQ(closed.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(closed.error_message(), HasSubstr(kClosed));
  EXPECT_THAT(closed.error_message(),
              HasSubstr("it may refuse this client's certificate"));
  // Nothing listening: no hint, nothing changed.
  const grpc::Status refused =
      Explain(grpc::Status(grpc::StatusCode::UNAVAILABLE, kRefused), good);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(refused.error_message(), kRefused);
}

TEST_F(HandshakeRefusalTest, OtherStatusesAreLeftAlone) {
  const std::string expired =
      Issue(true, absl::Now() - absl::Hours(48), absl::Now() - absl::Hours(24));
  for (const grpc::Status& status :
       {grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "was revoked"),
        grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "not a member"),
        grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline"),
        grpc::Status::OK}) {
    const grpc::Status explained = Explain(status, expired);
    EXPECT_EQ(explained.error_code(), status.error_code());
    EXPECT_EQ(explained.error_message(), status.error_message());
  }
  // A handshake this client failed itself keeps its own reason.
  const grpc::Status own(
      grpc::StatusCode::UNAVAILABLE,
      "failed to connect to all addresses; last error: UNKNOWN: "
      "ipv4:127.0.0.1:50051: Ssl handshake failed: SSL_ERROR_SSL: "
      "error:0A000086:SSL routines::certificate verify failed");
  EXPECT_EQ(Explain(own, expired).error_message(), own.error_message());
  // Without a CA to check against, nothing is explained.
  const grpc::Status closed(grpc::StatusCode::UNAVAILABLE, kClosed);
  EXPECT_EQ(
      ExplainHandshakeRefusal(closed, kAddress, nullptr, expired, absl::Now())
          .error_message(),
      kClosed);
}

}  // namespace
}  // namespace fedgather
