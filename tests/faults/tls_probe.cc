#include "tests/faults/tls_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace fedgather::testing {
namespace {

std::string SslErrors() {
  std::string text;
  for (unsigned long e; (e = ERR_get_error()) != 0;) {
    char line[256];
    ERR_error_string_n(e, line, sizeof line);
    absl::StrAppend(&text, text.empty() ? "" : "; ", line);
  }
  return text;
}

void SetReadTimeout(int fd, absl::Duration timeout) {
  const int64_t us = absl::ToInt64Microseconds(timeout);
  timeval tv{static_cast<time_t>(us / 1000000),
             static_cast<suseconds_t>(us % 1000000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

}  // namespace

struct TlsProbe::Ssl {
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  ~Ssl() {
    SSL_free(ssl);
    SSL_CTX_free(ctx);
  }
};

std::unique_ptr<TlsProbe> TlsProbe::Open(int port, const TlsProbeOptions& o) {
  // A write to a connection the server closed must fail, not kill the test.
  ::signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<TlsProbe> probe(new TlsProbe);
  probe->ssl_ = std::make_unique<Ssl>();
  ERR_clear_error();
  SSL_CTX* ctx = probe->ssl_->ctx = SSL_CTX_new(TLS_client_method());
  const std::string cert = o.tls_dir + "/cert.pem",
                    key = o.tls_dir + "/key.pem", ca = o.tls_dir + "/ca.pem";
  if (ctx == nullptr ||
      (!o.anonymous &&
       (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) !=
            1)) ||
      SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr) != 1) {
    probe->error_ = "client setup (a test bug): " + SslErrors();
    return probe;
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  const int fd = probe->fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  SetReadTimeout(fd, absl::Seconds(10));
  sockaddr_in source{}, server{};
  source.sin_family = server.sin_family = AF_INET;
  inet_pton(AF_INET, o.source.c_str(), &source.sin_addr);
  server.sin_port = htons(static_cast<uint16_t>(port));
  server.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof source) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&server), sizeof server) != 0) {
    probe->error_ = absl::StrCat("bind or connect: ", strerror(errno));
    return probe;
  }
  SSL* ssl = probe->ssl_->ssl = SSL_new(ctx);
  static const unsigned char kAlpnH2[] = {2, 'h', '2'};
  SSL_set_alpn_protos(ssl, kAlpnH2, sizeof kAlpnH2);
  SSL_set_tlsext_host_name(ssl, "localhost");
  SSL_set1_host(ssl, "localhost");
  SSL_set_fd(ssl, fd);
  if (const int connected = SSL_connect(ssl); connected != 1) {
    probe->error_ =
        absl::StrCat("SSL_connect: SSL_get_error ",
                     SSL_get_error(ssl, connected), ": ", SslErrors());
    return probe;
  }
  probe->tls_up_ = true;
  static const char kPreface[] =
      "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
      "\0\0\0\x04\0\0\0\0\0";  // SETTINGS, no parameters
  unsigned char frame[9];
  int got = 0;
  if (SSL_write(ssl, kPreface, sizeof kPreface - 1) ==
      static_cast<int>(sizeof kPreface - 1)) {
    got = SSL_read(ssl, frame, sizeof frame);
  }
  if (got == static_cast<int>(sizeof frame) && frame[3] == 0x04) {
    probe->reached_http2_ = true;
  } else {
    probe->error_ =
        absl::StrCat("first HTTP/2 read: SSL_read ", got, ", SSL_get_error ",
                     SSL_get_error(ssl, got), ": ", SslErrors());
    probe->closed_ = got <= 0;
  }
  return probe;
}

TlsProbe::~TlsProbe() {
  ssl_.reset();
  if (fd_ >= 0) ::close(fd_);
}

bool TlsProbe::ClosedWithin(absl::Duration bound) {
  if (closed_) return true;
  const absl::Time deadline = absl::Now() + bound;
  SetReadTimeout(fd_, absl::Milliseconds(100));
  char buffer[4096];
  while (absl::Now() < deadline) {
    if (tls_up_) {
      const int n = SSL_read(ssl_->ssl, buffer, sizeof buffer);
      if (n > 0 || SSL_get_error(ssl_->ssl, n) == SSL_ERROR_WANT_READ) {
        continue;
      }
      ERR_clear_error();
    } else {  // the handshake failed: see whether the socket is closed
      const ssize_t n = ::read(fd_, buffer, sizeof buffer);
      if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) continue;
    }
    closed_ = true;
    return true;
  }
  return false;
}

}  // namespace fedgather::testing
