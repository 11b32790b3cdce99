#include "client/relay_data_plane.h"

#include <grpcpp/support/client_callback.h>

#include <utility>

#include "common/grpc_status.h"

namespace fedgather {
namespace {

constexpr char kCollectiveMethod[] = "/fedgather.v1.Rendezvous/Collective";

// One Collective stream: a gRPC reactor that hands its events to the
// handler. It holds no lock; gRPC keeps one write and one read in flight.
class RelayStream
    : public HeldFrameStream,
      public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  RelayStream(grpc::GenericStub* stub, grpc::ByteBuffer header,
              FrameHandler* handler, bool held)
      : stub_(stub),
        handler_(handler),
        held_(held),
        write_buffer_(std::move(header)) {}

  void Start() override {
    stub_->PrepareBidiStreamingCall(&context_, kCollectiveMethod,
                                    grpc::StubOptions(), this);
    if (held_) AddHold();
    StartRead(&read_buffer_);
    StartWrite(&write_buffer_);
    StartCall();
  }
  void Write(grpc::ByteBuffer frame) override {
    write_buffer_ = std::move(frame);
    StartWrite(&write_buffer_);
  }
  void WritesDone() override { StartWritesDone(); }
  void Cancel() override { context_.TryCancel(); }
  void Release() override { RemoveHold(); }

 private:
  void OnWriteDone(bool ok) override { handler_->OnWritten(ok); }
  void OnReadDone(bool ok) override {
    if (ok && handler_->OnFrame(read_buffer_)) {
      StartRead(&read_buffer_);
    } else if (!ok) {
      handler_->OnReadEnded();
    }
  }
  void OnDone(const grpc::Status& status) override {
    const auto& trailers = context_.GetServerTrailingMetadata();
    auto it = trailers.find(kFinalStatusKey);
    const bool server_final =
        it != trailers.end() && it->second != kFinalStatusRetry;
    // The last touch: the owner may destroy this stream once told.
    handler_->OnEnded(status, server_final);
  }

  grpc::GenericStub* const stub_;
  FrameHandler* const handler_;
  const bool held_;
  grpc::ClientContext context_;
  grpc::ByteBuffer write_buffer_;  // one write in flight
  grpc::ByteBuffer read_buffer_;   // one read in flight
};

}  // namespace

RelayDataPlane::RelayDataPlane(std::shared_ptr<grpc::Channel> channel)
    : stub_(std::move(channel)) {}

std::unique_ptr<FrameStream> RelayDataPlane::Open(grpc::ByteBuffer header,
                                                  FrameHandler* handler) {
  return std::make_unique<RelayStream>(&stub_, std::move(header), handler,
                                       /*held=*/false);
}

std::unique_ptr<HeldFrameStream> RelayDataPlane::OpenHeld(
    grpc::ByteBuffer header, FrameHandler* handler) {
  return std::make_unique<RelayStream>(&stub_, std::move(header), handler,
                                       /*held=*/true);
}

}  // namespace fedgather
