// Explaining a TLS handshake the server refused because of this client's
// certificate.
//
// The server verifies client certificates in the TLS handshake
// (common/tls_credentials.h). When it refuses one, gRPC 1.51's server closes
// the connection without a TLS alert, so the client learns nothing but that
// the connection closed: its call fails UNAVAILABLE ("failed to connect to
// all addresses; ... Socket closed"), exactly as when a proxy in front of a
// server that is not up yet closes it. The client therefore checks its own
// certificate as the server's handshake does, with its ca.pem standing for
// the server's client CA (`fedgather provision` writes one CA for both; where
// they differ, ca.pem must hold both, see docs/security.md). A certificate
// that fails is a configuration error that no retry mends: the call becomes
// UNAUTHENTICATED naming why, and Join's connect retries stop at once
// (client/group.cc retries UNAVAILABLE only).
#ifndef FEDGATHER_CLIENT_HANDSHAKE_REFUSAL_H_
#define FEDGATHER_CLIENT_HANDSHAKE_REFUSAL_H_

#include <grpcpp/support/client_interceptor.h>
#include <grpcpp/support/status.h>

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/cert_verifier.h"
#include "common/clock.h"
#include "common/tls_credentials.h"

namespace fedgather {

// ExplainHandshakeRefusal returns `status` unchanged unless it is
// UNAVAILABLE and not a handshake this client failed itself (gRPC's "Ssl
// handshake failed: ...", e.g. the server's certificate does not verify
// against ca.pem). Then, when `own_ca` (a verifier of this client's ca.pem;
// null when ca.pem holds no CA) refuses `cert_pem` at `now`, it returns
// UNAUTHENTICATED:
//   this client's certificate cannot pass the TLS handshake of the server at
//   <address>: <the verifier's reason> (...)
// and otherwise, for a connection the server closed before the call could
// use it, `status` with a hint that the server may refuse the certificate.
// Pure CPU work; any thread.
grpc::Status ExplainHandshakeRefusal(const grpc::Status& status,
                                     absl::string_view address,
                                     const ClientCertVerifier* own_ca,
                                     absl::string_view cert_pem,
                                     absl::Time now);

// MakeHandshakeRefusalInterceptor returns a client interceptor factory that
// applies ExplainHandshakeRefusal, with the certificate and CA of `tls`, to
// the status of every call of its channel, at `clock`'s time (it must
// outlive the factory). Its interceptors never block.
std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
MakeHandshakeRefusalInterceptor(std::string address, const TlsFiles& tls,
                                Clock* clock = SystemClock());

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_HANDSHAKE_REFUSAL_H_
