// RendezvousService: the gRPC callback service. It binds every stream to the
// identity in the peer's verified client certificate and hands the stream to
// its reactor. Collective runs on raw byte buffers (zero-copy fan-out).
#ifndef FEDGATHER_SERVER_RENDEZVOUS_SERVICE_H_
#define FEDGATHER_SERVER_RENDEZVOUS_SERVICE_H_

#include <functional>

#include "absl/time/time.h"
#include "fedgather/v1/fedgather.grpc.pb.h"
#include "server/group_registry.h"

namespace fedgather::server {

class RendezvousService : public v1::Rendezvous::WithCallbackMethod_Session<
                              v1::Rendezvous::WithRawCallbackMethod_Collective<
                                  v1::Rendezvous::Service>> {
 public:
  // `registry` must outlive the service.
  RendezvousService(GroupRegistry* registry, int64_t max_chunk_bytes,
                    std::function<absl::Time()> clock);

  grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent>* Session(
      grpc::CallbackServerContext* context) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Collective(
      grpc::CallbackServerContext* context) override;

 private:
  GroupRegistry* const registry_;
  const int64_t max_chunk_bytes_;
  const std::function<absl::Time()> clock_;
};

// PeerIdentity returns the identity of the verified client certificate of
// `context`'s peer; UNAUTHENTICATED when there is none.
absl::StatusOr<std::string> PeerIdentity(
    const grpc::CallbackServerContext& context);

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_RENDEZVOUS_SERVICE_H_
