#include "server/rendezvous_service.h"

#include <grpc/grpc_security_constants.h>

#include "absl/strings/str_cat.h"
#include "common/peer_identity.h"
#include "server/collective_reactor.h"
#include "server/session_reactor.h"

namespace fedgather::server {

absl::StatusOr<std::string> PeerIdentity(
    const grpc::CallbackServerContext& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) {
    return absl::UnauthenticatedError(
        "the peer presented no client certificate");
  }
  std::vector<grpc::string_ref> pems =
      auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
  if (pems.empty()) {
    return absl::UnauthenticatedError("the peer's certificate is unavailable");
  }
  absl::StatusOr<std::string> identity = IdentityFromCertificatePem(
      absl::string_view(pems.front().data(), pems.front().size()));
  if (!identity.ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat("no identity in the client certificate: ",
                     identity.status().message()));
  }
  return identity;
}

RendezvousService::RendezvousService(GroupRegistry* registry,
                                     int64_t max_chunk_bytes,
                                     std::function<absl::Time()> clock)
    : registry_(registry),
      max_chunk_bytes_(max_chunk_bytes),
      clock_(std::move(clock)) {}

grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent>*
RendezvousService::Session(grpc::CallbackServerContext* context) {
  return SessionReactor::Start(registry_, PeerIdentity(*context), clock_);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
RendezvousService::Collective(grpc::CallbackServerContext* context) {
  return CollectiveReactor::Start(registry_, PeerIdentity(*context),
                                  max_chunk_bytes_, clock_);
}

}  // namespace fedgather::server
