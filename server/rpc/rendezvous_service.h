// RendezvousService: the gRPC callback service of sessions and collectives.
// Each new stream is admitted by AccessControl (its client certificate is
// verified, and it holds one of the identity's concurrent streams) and is
// then handed to its reactor. Collective runs on raw byte buffers
// (zero-copy fan-out).
#ifndef FEDGATHER_SERVER_RPC_RENDEZVOUS_SERVICE_H_
#define FEDGATHER_SERVER_RPC_RENDEZVOUS_SERVICE_H_

#include <functional>

#include "absl/time/time.h"
#include "common/clock.h"
#include "fedgather/v1/fedgather.grpc.pb.h"
#include "server/access/access_control.h"
#include "server/membership/group_registry.h"
#include "server/rpc/first_frame_deadlines.h"

namespace fedgather::server {

class RendezvousService : public v1::Rendezvous::WithCallbackMethod_Session<
                              v1::Rendezvous::WithRawCallbackMethod_Collective<
                                  v1::Rendezvous::Service>> {
 public:
  // `registry` and `access` must outlive the service.
  // `first_frame` (which must outlive the service too) watches every new
  // stream until its first message.
  RendezvousService(GroupRegistry* registry, AccessControl* access,
                    FirstFrameDeadlines* first_frame, int64_t max_chunk_bytes,
                    Clock* clock);

  grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent>* Session(
      grpc::CallbackServerContext* context) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Collective(
      grpc::CallbackServerContext* context) override;

 private:
  GroupRegistry* const registry_;
  AccessControl* const access_;
  FirstFrameDeadlines* const first_frame_;
  const int64_t max_chunk_bytes_;
  Clock* const clock_;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_RPC_RENDEZVOUS_SERVICE_H_
