// Plaintext gRPC credentials, for benchmarks only: `fedgather-server
// --insecure-plaintext-for-benchmarks` and the matching client option
// (TlsFiles::insecure_plaintext_for_benchmarks), so that a benchmark can
// measure what TLS costs. Nothing is encrypted and nothing is authenticated:
// the server takes each caller's identity from the kPlaintextIdentityHeader
// request header, whose value the caller chooses. See docs/security.md.
//
// How the identity travels: the client adds the header to every call; the
// server's credentials copy it, per call, into the call's auth context as
// kPlaintextIdentityProperty, which server/access/access_control.cc reads on a
// connection whose transport security type is "insecure". Only these server
// credentials set that property, and over TLS the transport type is "ssl",
// so a TLS server never takes an identity from a header.
#ifndef FEDGATHER_COMMON_PLAINTEXT_CREDENTIALS_H_
#define FEDGATHER_COMMON_PLAINTEXT_CREDENTIALS_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/client_interceptor.h>

#include <memory>
#include <string>

namespace fedgather {

// The request header a plaintext client names its identity in.
inline constexpr char kPlaintextIdentityHeader[] =
    "fedgather-plaintext-identity";
// The auth-context property the plaintext server credentials copy it to.
inline constexpr char kPlaintextIdentityProperty[] =
    "fedgather_plaintext_identity";

// MakePlaintextServerCredentials listens without TLS and copies each call's
// kPlaintextIdentityHeader into its auth context (consuming the header).
std::shared_ptr<grpc::ServerCredentials> MakePlaintextServerCredentials();

// MakePlaintextChannelCredentials connects without TLS and sends `identity`
// in kPlaintextIdentityHeader on every call of channels made with them
// (through MakeIdentityHeaderInterceptor).
std::shared_ptr<grpc::ChannelCredentials> MakePlaintextChannelCredentials(
    std::string identity);

// MakeIdentityHeaderInterceptor returns a client interceptor factory that
// adds kPlaintextIdentityHeader: `identity` to every call of a channel. A
// TLS server ignores the header (tests check that it does).
std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
MakeIdentityHeaderInterceptor(std::string identity);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_PLAINTEXT_CREDENTIALS_H_
