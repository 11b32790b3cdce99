// TLS material and the gRPC credentials built from it. Both sides use mutual
// TLS: the server requires and verifies a client certificate in the
// handshake, and the client verifies the server against its CA.
#ifndef FEDGATHER_COMMON_TLS_CREDENTIALS_H_
#define FEDGATHER_COMMON_TLS_CREDENTIALS_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace fedgather {

struct TlsFiles {
  std::string cert_pem;  // this end's certificate
  std::string key_pem;   // its private key
  std::string ca_pem;    // the CA that must have signed the peer
  // Benchmarks only: no TLS at all (common/plaintext_credentials.h). The
  // server then takes each caller's identity from a request header; a
  // client sends the identity its cert_pem names. Off unless set
  // explicitly (fedgather-server --insecure-plaintext-for-benchmarks).
  bool insecure_plaintext_for_benchmarks = false;
};

// ReadTlsFiles loads the three PEM files; the error names the missing file.
absl::StatusOr<TlsFiles> ReadTlsFiles(const std::string& cert_path,
                                      const std::string& key_path,
                                      const std::string& ca_path);

// ReadTlsDir loads DIR/cert.pem, DIR/key.pem and DIR/ca.pem, the layout that
// `fedgather provision` writes for each participant.
absl::StatusOr<TlsFiles> ReadTlsDir(const std::string& dir);

// MakeServerCredentials requires a client certificate in the TLS handshake
// and verifies it there against `files.ca_pem` (the client CA, --client-ca):
// it must chain to it, every certificate of the chain must be valid now, and
// the leaf must be fit for client authentication (OpenSSL's "SSL client"
// purpose). A client that presents none, or one that fails, never reaches
// HTTP/2: gRPC closes the connection (without a TLS alert) and logs
// "Handshake failed ..." on the server; there is no audit record. What the
// handshake does not check (the CRL, a CA used as a leaf, the identity, the
// policy) is checked on every call (common/cert_verifier.h). TLS 1.2 is the
// minimum (gRPC's default, checked in tests/e2e/tls_config_test.cc). With
// files.insecure_plaintext_for_benchmarks: MakePlaintextServerCredentials.
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(
    const TlsFiles& files);

// MakeChannelCredentials presents `files.cert_pem` and verifies the server.
// With files.insecure_plaintext_for_benchmarks: MakePlaintextChannelCredentials
// with the identity files.cert_pem names (empty when it names none).
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(
    const TlsFiles& files);

// kAeadCipherSuites is gRPC's default cipher list: AEAD suites only (AES-GCM
// and ChaCha20-Poly1305, for TLS 1.3 and for TLS 1.2 with ECDHE).
inline constexpr const char* kAeadCipherSuites =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
    "TLS_CHACHA20_POLY1305_SHA256:ECDHE-ECDSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-RSA-AES256-GCM-SHA384";

// CheckCipherSuiteOverride checks the GRPC_SSL_CIPHER_SUITES environment
// value (`value`, null when unset), through which gRPC lets an operator
// replace its cipher list: every suite it names must be one of
// kAeadCipherSuites, else INVALID_ARGUMENT naming the first that is not.
absl::Status CheckCipherSuiteOverride(const char* value);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_TLS_CREDENTIALS_H_
