// TlsProbe: one TLS connection to the server driven by hand, as an attacker
// would: from a chosen loopback source address (127.0.0.0/8, so that tests
// can tell attackers from members by address), with or without a client
// certificate, and then silent: after the HTTP/2 preface and an empty
// SETTINGS frame it opens no stream and answers nothing (not even PINGs).
#ifndef FEDGATHER_TESTS_FAULTS_TLS_PROBE_H_
#define FEDGATHER_TESTS_FAULTS_TLS_PROBE_H_

#include <memory>
#include <string>

#include "absl/time/time.h"

namespace fedgather::testing {

struct TlsProbeOptions {
  std::string source = "127.0.0.1";  // the local address to connect from
  // A directory with cert.pem, key.pem and ca.pem; without cert.pem's
  // certificate when `anonymous`.
  std::string tls_dir;
  bool anonymous = false;
};

class TlsProbe {
 public:
  // Open connects to 127.0.0.1:`port`, runs the TLS handshake and speaks
  // HTTP/2 until the server's first frame; each step waits at most 10 s.
  // Never fails the test: what happened is in reached_http2 and error.
  // Ignores SIGPIPE in the process (the server may close first).
  static std::unique_ptr<TlsProbe> Open(int port, const TlsProbeOptions& o);
  ~TlsProbe();

  // The server answered the preface with a SETTINGS frame: it admitted the
  // connection and completed the handshake.
  bool reached_http2() const { return reached_http2_; }
  // How the handshake or the first read failed; empty when reached_http2.
  const std::string& error() const { return error_; }
  // ClosedWithin reads (and drops) what the server sends until it closes
  // the connection; false when it is still open after `bound`.
  bool ClosedWithin(absl::Duration bound);

 private:
  TlsProbe() = default;
  struct Ssl;
  std::unique_ptr<Ssl> ssl_;
  int fd_ = -1;
  bool tls_up_ = false;  // SSL_connect succeeded
  bool reached_http2_ = false;
  bool closed_ = false;
  std::string error_;
};

}  // namespace fedgather::testing

#endif  // FEDGATHER_TESTS_FAULTS_TLS_PROBE_H_
