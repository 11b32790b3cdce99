// The server's TLS configuration, seen from the wire: a raw OpenSSL client
// (not gRPC) dials a real server on 127.0.0.1 and offers exactly one protocol
// version and one family of cipher suites at a time. The client's security
// level is 0 so that it can offer even TLS 1.0 and 1.1; what is refused is
// then refused by the server, which the test checks by the ClientHello going
// out and no ServerHello coming back. The client also presents no
// certificate, or one the server must refuse, and checks that the server
// closes the connection before HTTP/2: the server's answer to the HTTP/2
// preface (its SETTINGS frame) comes only after a good certificate. This is
// the suite's check that client-certificate authentication is required,
// which `testssl.sh` reports (docs/security.md).
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <csignal>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cert_issuer.h"
#include "common/file_io.h"
#include "tests/e2e/test_cluster.h"

namespace fedgather::testing {
namespace {

using ::testing::HasSubstr;

struct SslDeleter {
  void operator()(SSL_CTX* p) const { SSL_CTX_free(p); }
  void operator()(SSL* p) const { SSL_free(p); }
};

// What one handshake attempt gave.
struct Handshake {
  bool ok = false;
  std::string version;  // SSL_get_version, e.g. "TLSv1.3"
  std::string cipher;   // OpenSSL's name of the negotiated suite
  bool aead = false;
  std::string error;  // OpenSSL's error queue when !ok
  bool client_hello_sent = false;
  bool server_hello_received = false;
  // After a completed handshake (ok): whether the server answered the
  // HTTP/2 preface with a SETTINGS frame, else how the read failed.
  bool reached_http2 = false;
  std::string http2_error;
};

// RecordHellos is the SSL message callback: it notes the ClientHello going
// out and a ServerHello coming back.
void RecordHellos(int write_p, int /*version*/, int content_type,
                  const void* buf, size_t len, SSL* /*ssl*/, void* arg) {
  if (content_type != SSL3_RT_HANDSHAKE || len == 0) return;
  Handshake* h = static_cast<Handshake*>(arg);
  const int type = static_cast<const unsigned char*>(buf)[0];
  if (write_p == 1 && type == SSL3_MT_CLIENT_HELLO) h->client_hello_sent = true;
  if (write_p == 0 && type == SSL3_MT_SERVER_HELLO) {
    h->server_hello_received = true;
  }
}

struct ClientHello {
  int min_version = TLS1_VERSION;
  int max_version = TLS1_3_VERSION;
  // TLS 1.2 and below; empty keeps OpenSSL's default list.
  std::string cipher_list;
  // TLS 1.3; empty keeps OpenSSL's default suites.
  std::string ciphersuites;
  // The client certificate and key files to present; empty: the
  // certificate of TestCluster::Site(0). No certificate at all when
  // `anonymous`.
  std::string cert_path;
  std::string key_path;
  bool anonymous = false;
};

std::string DrainErrors() {
  std::string out;
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(e, buffer, sizeof(buffer));
    absl::StrAppend(&out, out.empty() ? "" : "; ", buffer);
  }
  return out;
}

// Dial opens a blocking TCP connection to 127.0.0.1:`port` whose reads and
// writes time out after 10 s, so a stuck handshake fails instead of hanging.
int Dial(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval timeout = {10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
      0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// SpeakHttp2 sends the HTTP/2 client preface and an empty SETTINGS frame on
// a completed handshake and reads the first frame header of the answer.
void SpeakHttp2(SSL* ssl, Handshake* out) {
  static const char kPreface[] =
      "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
      "\0\0\0\x04\0\0\0\0\0";  // SETTINGS, no parameters
  unsigned char frame[9];
  int got = 0;
  if (SSL_write(ssl, kPreface, sizeof(kPreface) - 1) ==
      static_cast<int>(sizeof(kPreface) - 1)) {
    got = SSL_read(ssl, frame, sizeof(frame));
  }
  if (got == static_cast<int>(sizeof(frame)) && frame[3] == 0x04) {
    out->reached_http2 = true;
  } else {
    out->http2_error =
        absl::StrCat("SSL_read ", got, ": SSL_get_error ",
                     SSL_get_error(ssl, got), ": ", DrainErrors());
  }
}

// Shake runs one TLS handshake with `hello` against the cluster's server,
// presenting the certificate `hello` names and verifying the server against
// the CA; after a completed handshake it speaks HTTP/2 (SpeakHttp2).
Handshake Shake(const TestCluster& cluster, const ClientHello& hello) {
  ERR_clear_error();
  Handshake out;
  std::unique_ptr<SSL_CTX, SslDeleter> ctx(SSL_CTX_new(TLS_client_method()));
  if (ctx == nullptr) {
    out.error = "SSL_CTX_new: " + DrainErrors();
    return out;
  }
  SSL_CTX_set_security_level(ctx.get(), 0);
  const std::string site = cluster.dir() + "/" + TestCluster::Site(0);
  const std::string cert_path =
      hello.cert_path.empty() ? site + "/cert.pem" : hello.cert_path;
  const std::string key_path =
      hello.key_path.empty() ? site + "/key.pem" : hello.key_path;
  if (SSL_CTX_set_min_proto_version(ctx.get(), hello.min_version) != 1 ||
      SSL_CTX_set_max_proto_version(ctx.get(), hello.max_version) != 1 ||
      (!hello.cipher_list.empty() &&
       SSL_CTX_set_cipher_list(ctx.get(), hello.cipher_list.c_str()) != 1) ||
      (!hello.ciphersuites.empty() &&
       SSL_CTX_set_ciphersuites(ctx.get(), hello.ciphersuites.c_str()) != 1) ||
      (!hello.anonymous &&
       (SSL_CTX_use_certificate_chain_file(ctx.get(), cert_path.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx.get(), key_path.c_str(),
                                    SSL_FILETYPE_PEM) != 1)) ||
      SSL_CTX_load_verify_locations(ctx.get(), (site + "/ca.pem").c_str(),
                                    nullptr) != 1) {
    out.error = "client setup (a test bug): " + DrainErrors();
    ADD_FAILURE() << out.error;
    return out;
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  std::unique_ptr<SSL, SslDeleter> ssl(SSL_new(ctx.get()));
  const int fd = Dial(
      std::stoi(cluster.address().substr(cluster.address().rfind(':') + 1)));
  if (ssl == nullptr || fd < 0) {
    out.error = "SSL_new or connect failed";
    ADD_FAILURE() << out.error;
    if (fd >= 0) ::close(fd);
    return out;
  }
  static const unsigned char kAlpnH2[] = {2, 'h', '2'};
  SSL_set_alpn_protos(ssl.get(), kAlpnH2, sizeof(kAlpnH2));
  SSL_set_tlsext_host_name(ssl.get(), "localhost");
  SSL_set1_host(ssl.get(), "localhost");
  SSL_set_fd(ssl.get(), fd);
  SSL_set_msg_callback(ssl.get(), RecordHellos);
  SSL_set_msg_callback_arg(ssl.get(), &out);
  const int connected = SSL_connect(ssl.get());
  if (connected == 1) {
    out.ok = true;
    out.version = SSL_get_version(ssl.get());
    const SSL_CIPHER* cipher = SSL_get_current_cipher(ssl.get());
    out.cipher = SSL_CIPHER_get_name(cipher);
    out.aead = SSL_CIPHER_is_aead(cipher) == 1;
    SpeakHttp2(ssl.get(), &out);
    if (out.reached_http2) SSL_shutdown(ssl.get());
  } else {
    out.error =
        absl::StrCat("SSL_connect: SSL_get_error ",
                     SSL_get_error(ssl.get(), connected), ": ", DrainErrors());
  }
  ::close(fd);
  return out;
}

// ExpectRefusedByServer checks that the client did offer its ClientHello and
// that the server answered with no ServerHello: it sent an alert or, as
// gRPC's handshaker does, closed the connection.
void ExpectRefusedByServer(const Handshake& h) {
  EXPECT_FALSE(h.ok) << "the server accepted " << h.version << " with "
                     << h.cipher;
  EXPECT_TRUE(h.client_hello_sent) << h.error;
  EXPECT_FALSE(h.server_hello_received) << h.error;
  EXPECT_THAT(h.error, ::testing::AnyOf(HasSubstr("alert"),
                                        HasSubstr("unexpected eof")));
}

class TlsConfigTest : public ::testing::Test {
 protected:
  // A write to a connection the server closed must fail, not kill the test.
  static void SetUpTestSuite() { std::signal(SIGPIPE, SIG_IGN); }

  TestCluster cluster_{ClusterOptions(2)};
};

TEST_F(TlsConfigTest, Tls10IsRefused) {
  ClientHello hello;
  hello.min_version = hello.max_version = TLS1_VERSION;
  hello.cipher_list = "ALL:@SECLEVEL=0";
  ExpectRefusedByServer(Shake(cluster_, hello));
}

TEST_F(TlsConfigTest, Tls11IsRefused) {
  ClientHello hello;
  hello.min_version = hello.max_version = TLS1_1_VERSION;
  hello.cipher_list = "ALL:@SECLEVEL=0";
  ExpectRefusedByServer(Shake(cluster_, hello));
}

TEST_F(TlsConfigTest, Tls12WithOnlyCbcSuitesIsRefused) {
  ClientHello hello;
  hello.min_version = hello.max_version = TLS1_2_VERSION;
  hello.cipher_list =
      "ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES256-SHA384:"
      "ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA:AES128-SHA:AES256-SHA:"
      "AES128-SHA256:@SECLEVEL=0";
  ExpectRefusedByServer(Shake(cluster_, hello));
}

TEST_F(TlsConfigTest, Tls12WithAesGcmIsAccepted) {
  ClientHello hello;
  hello.min_version = hello.max_version = TLS1_2_VERSION;
  hello.cipher_list = "ECDHE-ECDSA-AES128-GCM-SHA256";
  const Handshake h = Shake(cluster_, hello);
  ASSERT_TRUE(h.ok) << h.error;
  EXPECT_EQ(h.version, "TLSv1.2");
  EXPECT_EQ(h.cipher, "ECDHE-ECDSA-AES128-GCM-SHA256");
  EXPECT_TRUE(h.aead);
  EXPECT_TRUE(h.reached_http2) << h.http2_error;
}

TEST_F(TlsConfigTest, Tls12OfferingEverythingNegotiatesAead) {
  ClientHello hello;
  hello.min_version = hello.max_version = TLS1_2_VERSION;
  hello.cipher_list = "ALL:@SECLEVEL=0";
  const Handshake h = Shake(cluster_, hello);
  ASSERT_TRUE(h.ok) << h.error;
  EXPECT_EQ(h.version, "TLSv1.2");
  EXPECT_TRUE(h.aead) << h.cipher;
}

TEST_F(TlsConfigTest, Tls13IsAcceptedWithAeadSuite) {
  ClientHello hello;
  hello.min_version = hello.max_version = TLS1_3_VERSION;
  const Handshake h = Shake(cluster_, hello);
  ASSERT_TRUE(h.ok) << h.error;
  EXPECT_EQ(h.version, "TLSv1.3");
  EXPECT_TRUE(h.aead) << h.cipher;
  EXPECT_TRUE(h.reached_http2) << h.http2_error;
}

TEST_F(TlsConfigTest, AnyVersionNegotiatesTls13) {
  const Handshake h = Shake(cluster_, ClientHello());
  ASSERT_TRUE(h.ok) << h.error;
  EXPECT_EQ(h.version, "TLSv1.3");
  EXPECT_TRUE(h.aead) << h.cipher;
}

// ExpectClientCertificateRefused checks, for TLS 1.2 and 1.3, that a client
// presenting what `hello` names never reaches HTTP/2. In TLS 1.2 the server
// judges the certificate before its Finished, so the handshake fails; in
// TLS 1.3 the client's side of the handshake completes first, and the
// server then closes the connection. gRPC 1.51 sends no TLS alert in either
// case.
void ExpectClientCertificateRefused(const TestCluster& cluster,
                                    ClientHello hello) {
  for (const int version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    SCOPED_TRACE(version == TLS1_2_VERSION ? "TLS 1.2" : "TLS 1.3");
    hello.min_version = hello.max_version = version;
    const Handshake h = Shake(cluster, hello);
    EXPECT_TRUE(h.server_hello_received) << h.error;
    EXPECT_EQ(h.ok, version == TLS1_3_VERSION) << h.error;
    EXPECT_FALSE(h.reached_http2) << "the server answered HTTP/2";
  }
}

TEST_F(TlsConfigTest, NoClientCertificateIsRefusedAtTheHandshake) {
  ClientHello hello;
  hello.anonymous = true;
  ExpectClientCertificateRefused(cluster_, hello);
}

TEST_F(TlsConfigTest, AnotherCasCertificateIsRefusedAtTheHandshake) {
  TestCluster other{ClusterOptions(2)};  // a second, unrelated CA
  ClientHello hello;
  hello.cert_path = other.dir() + "/" + TestCluster::Site(0) + "/cert.pem";
  hello.key_path = other.dir() + "/" + TestCluster::Site(0) + "/key.pem";
  ExpectClientCertificateRefused(cluster_, hello);
}

TEST_F(TlsConfigTest, AnExpiredCertificateIsRefusedAtTheHandshake) {
  const KeyAndCert ca{ReadFileToString(cluster_.dir() + "/ca-key.pem").value(),
                      ReadFileToString(cluster_.dir() + "/ca.pem").value()};
  CertificateSpec spec;
  spec.common_name = "expired";
  spec.client_auth = true;
  spec.not_before = absl::Now() - absl::Hours(48);
  spec.not_after = absl::Now() - absl::Hours(24);
  absl::StatusOr<KeyAndCert> expired = IssueCertificate(ca, spec);
  ASSERT_TRUE(expired.ok()) << expired.status();
  ClientHello hello;
  hello.cert_path = cluster_.dir() + "/expired-cert.pem";
  hello.key_path = cluster_.dir() + "/expired-key.pem";
  ASSERT_TRUE(WriteStringToFile(hello.cert_path, expired->cert_pem).ok());
  ASSERT_TRUE(WriteStringToFile(hello.key_path, expired->key_pem).ok());
  ExpectClientCertificateRefused(cluster_, hello);
}

}  // namespace
}  // namespace fedgather::testing
