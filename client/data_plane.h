// DataPlane: how the bytes of one collective travel (docs/architecture.md,
// "Two data planes, one control plane"). A CollectiveCall
// (client/collective_call.h) speaks the collective's frames (header,
// chunks, end; the others' headers and chunks, the commit) and checks the
// commit's digests; a DataPlane only carries those frames for it. The first
// implementation is the server's relay (RelayDataPlane,
// client/relay_data_plane.h): one Collective stream to the server per
// attempt.
//
// The contract:
//   - Who opens: CollectiveCall, on the collective queue's thread (from
//     Start, then from Wait for each resume). It opens one FrameStream per
//     attempt and opens the next only after the previous one's
//     FrameHandler::OnEnded, so no two streams of a call are ever open at
//     once.
//   - Who owns what: the caller owns the FrameStream that Open returns and
//     must keep it alive until OnEnded has been called; it destroys it
//     after. The DataPlane must outlive its streams; the handler must
//     outlive the stream's OnEnded. A frame given to Write is owned by the
//     stream from then on.
//   - Which threads: Start, Write, WritesDone and Cancel may be called from
//     any thread; the stream calls its handler from the transport's threads
//     (gRPC's callback threads for the relay), never under a lock of its
//     own, so the handler may call Write, WritesDone or Cancel from inside.
//   - Order: at most one Write in flight (the next after OnWritten) and at
//     most one frame delivered at a time (the next read starts when OnFrame
//     returns true); OnEnded comes once, last, after every OnWritten and
//     OnFrame.
#ifndef FEDGATHER_CLIENT_DATA_PLANE_H_
#define FEDGATHER_CLIENT_DATA_PLANE_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <memory>

namespace fedgather {

// What a FrameStream tells the collective that opened it.
class FrameHandler {
 public:
  virtual ~FrameHandler() = default;
  // OnWritten: the last Write (the header's, then each one's) is done;
  // `ok` false when it failed (the stream is broken, frames may be lost).
  virtual void OnWritten(bool ok) = 0;
  // OnFrame handles one received frame; the handler may consume it (it is
  // the stream's read buffer, valid during the call). Returns whether to
  // read the next one.
  virtual bool OnFrame(grpc::ByteBuffer& frame) = 0;
  // OnReadEnded: the stream will deliver no more frames (the other side
  // is over, or OnFrame asked for no more); OnEnded follows. Only a
  // handler that writes from outside its calls needs it.
  virtual void OnReadEnded() {}
  // OnEnded: the stream is over with `status`; `server_final` tells that
  // the server ended it on purpose (the round's outcome, never resumed)
  // rather than the connection breaking.
  virtual void OnEnded(const grpc::Status& status, bool server_final) = 0;
};

// One stream of one collective attempt.
class FrameStream {
 public:
  virtual ~FrameStream() = default;
  // Start opens the stream, writes the header given to Open first and
  // starts reading. Call it once; handler calls may begin before it
  // returns.
  virtual void Start() = 0;
  // Write sends one frame; OnWritten follows.
  virtual void Write(grpc::ByteBuffer frame) = 0;
  // WritesDone half-closes: this rank sends nothing more on this stream.
  virtual void WritesDone() = 0;
  // Cancel ends the stream as broken (OnEnded follows, not server_final).
  virtual void Cancel() = 0;
};

class DataPlane {
 public:
  virtual ~DataPlane() = default;
  // Open makes a stream whose first frame will be `header` (this rank's
  // CollectiveHeader, resume fields included) and that reports to
  // `handler`. Nothing is sent before FrameStream::Start. Never blocks.
  virtual std::unique_ptr<FrameStream> Open(grpc::ByteBuffer header,
                                            FrameHandler* handler) = 0;
};

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_DATA_PLANE_H_
