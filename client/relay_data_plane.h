// RelayDataPlane: the relay data plane (client/data_plane.h) that every
// group uses today. Each FrameStream is one bidirectional Collective stream
// to the server, which relays the chunks to the other ranks (server/relay/)
// and sends back theirs and the commit. The frames travel as raw bytes
// (grpc::ByteBuffer, common/frame_codec.h), so a chunk's payload is never
// copied into a protobuf message.
#ifndef FEDGATHER_CLIENT_RELAY_DATA_PLANE_H_
#define FEDGATHER_CLIENT_RELAY_DATA_PLANE_H_

#include <grpcpp/channel.h>
#include <grpcpp/generic/generic_stub.h>

#include <memory>

#include "client/data_plane.h"

namespace fedgather {

// A Collective stream opened with a hold (RelayDataPlane::OpenHeld): it
// does not end (FrameHandler::OnEnded) until Release, so a thread outside
// its handler's calls may still Write and WritesDone on it, as gRPC's
// AddHold allows. Its handler hears OnReadEnded when the server's side is
// over; every path must call Release exactly once after the last write it
// starts.
class HeldFrameStream : public FrameStream {
 public:
  virtual void Release() = 0;
};

class RelayDataPlane : public DataPlane {
 public:
  // The streams go over `channel` (the group's connection to the server).
  explicit RelayDataPlane(std::shared_ptr<grpc::Channel> channel);

  // Open: a stream of the Collective RPC. OnEnded's `server_final` is the
  // server's fedgather-final trailer (one that asks for a retry is not).
  std::unique_ptr<FrameStream> Open(grpc::ByteBuffer header,
                                    FrameHandler* handler) override;
  // OpenHeld is Open with a hold (HeldFrameStream).
  std::unique_ptr<HeldFrameStream> OpenHeld(grpc::ByteBuffer header,
                                            FrameHandler* handler);

 private:
  grpc::GenericStub stub_;  // thread-safe: streams start from any thread
};

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_RELAY_DATA_PLANE_H_
