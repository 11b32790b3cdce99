#include "server/rpc/rendezvous_service.h"

#include "server/rpc/collective_reactor.h"
#include "server/rpc/session_reactor.h"

namespace fedgather::server {

RendezvousService::RendezvousService(GroupRegistry* registry,
                                     AccessControl* access,
                                     FirstFrameDeadlines* first_frame,
                                     int64_t max_chunk_bytes, Clock* clock)
    : registry_(registry),
      access_(access),
      first_frame_(first_frame),
      max_chunk_bytes_(max_chunk_bytes),
      clock_(clock) {}

grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent>*
RendezvousService::Session(grpc::CallbackServerContext* context) {
  return SessionReactor::Start(
      context, registry_, access_, first_frame_,
      access_->AdmitStream(context->auth_context().get(), context->peer(),
                           "Session"),
      clock_);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
RendezvousService::Collective(grpc::CallbackServerContext* context) {
  return CollectiveReactor::Start(
      context, registry_, access_, first_frame_,
      access_->AdmitStream(context->auth_context().get(), context->peer(),
                           "Collective"),
      max_chunk_bytes_, clock_);
}

}  // namespace fedgather::server
