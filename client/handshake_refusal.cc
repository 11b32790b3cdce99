#include "client/handshake_refusal.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace fedgather {
namespace {

// How this client names its ca.pem in a refusal of its own certificate.
constexpr char kOwnCaName[] = "the CA in this client's ca.pem";

// A call that never got a connection because the peer closed it, in gRPC
// 1.51's words (the only form in which gRPC reports it).
bool IsClosedBeforeUse(const grpc::Status& status) {
  return absl::StrContains(status.error_message(),
                           "failed to connect to all addresses") &&
         absl::StrContains(status.error_message(), "Socket closed");
}

// A handshake this client failed itself, on the server's certificate or
// name: gRPC then reports OpenSSL's or its own reason, which stands as is.
bool IsOwnHandshakeFailure(const grpc::Status& status) {
  return absl::StrContains(status.error_message(), "Ssl handshake failed");
}

class HandshakeRefusalInterceptor final
    : public grpc::experimental::Interceptor {
 public:
  HandshakeRefusalInterceptor(const std::string* address,
                              const ClientCertVerifier* own_ca,
                              const std::string* cert_pem, Clock* clock)
      : address_(address),
        own_ca_(own_ca),
        cert_pem_(cert_pem),
        clock_(clock) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::POST_RECV_STATUS)) {
      grpc::Status* status = methods->GetRecvStatus();
      *status = ExplainHandshakeRefusal(*status, *address_, own_ca_, *cert_pem_,
                                        clock_->Now());
    }
    methods->Proceed();
  }

 private:
  // Owned by the factory, which outlives every call of its channel.
  const std::string* address_;
  const ClientCertVerifier* own_ca_;
  const std::string* cert_pem_;
  Clock* const clock_;
};

class HandshakeRefusalFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  HandshakeRefusalFactory(std::string address, const TlsFiles& tls,
                          Clock* clock)
      : address_(std::move(address)), cert_pem_(tls.cert_pem), clock_(clock) {
    // A ca.pem without a CA certificate (a pinned leaf, say) cannot stand
    // for the server's client CA: then nothing is explained.
    absl::StatusOr<std::unique_ptr<ClientCertVerifier>> own_ca =
        ClientCertVerifier::Create(tls.ca_pem, /*crl_pem=*/"", kOwnCaName);
    if (own_ca.ok()) own_ca_ = *std::move(own_ca);
  }

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new HandshakeRefusalInterceptor(&address_, own_ca_.get(), &cert_pem_,
                                           clock_);
  }

 private:
  const std::string address_;
  const std::string cert_pem_;
  Clock* const clock_;
  std::unique_ptr<ClientCertVerifier> own_ca_;
};

}  // namespace

grpc::Status ExplainHandshakeRefusal(const grpc::Status& status,
                                     absl::string_view address,
                                     const ClientCertVerifier* own_ca,
                                     absl::string_view cert_pem,
                                     absl::Time now) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE ||
      own_ca == nullptr || IsOwnHandshakeFailure(status)) {
    return status;
  }
  const absl::StatusOr<VerifiedCertificate> own =
      own_ca->Verify(cert_pem, cert_pem, now);
  if (!own.ok()) {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        absl::StrCat(
            "this client's certificate cannot pass the TLS handshake of the "
            "server at ",
            address,
            ", which requires one issued by its client CA (--client-ca), "
            "valid now and for client authentication: ",
            own.status().message(),
            "; give this client a certificate from the server's CA (the "
            "cert.pem of --tls-dir) [gRPC reports the refused handshake "
            "only as: ",
            status.error_message(), "]"));
  }
  if (!IsClosedBeforeUse(status)) return status;
  return grpc::Status(
      status.error_code(),
      absl::StrCat(status.error_message(),
                   " [the server closed the connection in or right after the "
                   "TLS handshake; if it is up, it may refuse this client's "
                   "certificate, which passes the checks against ",
                   kOwnCaName, ": the server's --client-ca may be another CA]"),
      status.error_details());
}

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
MakeHandshakeRefusalInterceptor(std::string address, const TlsFiles& tls,
                                Clock* clock) {
  return std::make_unique<HandshakeRefusalFactory>(std::move(address), tls,
                                                   clock);
}

}  // namespace fedgather
