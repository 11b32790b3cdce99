// RoundDataPlane: the seam through which one round's bytes move between the
// server and each rank's Collective stream, whatever data plane the group
// uses (docs/architecture.md, "Two data planes, one control plane"). What a
// round's ranks must agree on and who contributed what (RoundAgreement,
// ContributionLedger) is the same for every data plane; what a rank's
// stream carries is the data plane's. The star relay's Round
// (server/relay/round.h) implements it: every chunk goes through the
// server and fans out to the other ranks. The direct plane is, for now, a
// mode of that Round (RoundOptions::direct): its streams carry the headers,
// the ends (claims), the claims, the deliveries and the commit, and no
// chunk (docs/decisions.md says why it is not a class of its own yet).
//
// The contract:
//   - Who calls: a rank's stream endpoint (CollectiveReactor,
//     server/rpc/collective_reactor.h), after the round took the rank's
//     header (Attach or Resume, which are the round's own), for that rank
//     only, until StreamLost or the end of its stream.
//   - Which threads: any (gRPC's callback threads). Every method is
//     thread-safe and takes the round's own lock briefly; it may be called
//     with the stream's own lock held (lock order: stream, then round).
//     Stream wake-ups and events are added to `callbacks`, which the caller
//     runs after the call returns, with no lock held: a data plane never
//     calls into a stream (RoundStream) under its lock.
//   - Who owns what: a frame handed to OfferChunk is the data plane's from
//     then on; `data` of OfferReduceChunk and the frame it comes in are only
//     borrowed for the call. A frame NextOutgoing returns is the stream's.
//   - Order, per rank: the upload offers its chunks in stream order, then
//     EndContribution once; the download asks NextOutgoing only while no
//     write of a frame it returned is in flight, and reports each with
//     WriteDone.
#ifndef FEDGATHER_SERVER_CONTROL_ROUND_DATA_PLANE_H_
#define FEDGATHER_SERVER_CONTROL_ROUND_DATA_PLANE_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/content_hasher.h"
#include "common/frame_codec.h"
#include "server/events/pending_callbacks.h"

namespace fedgather::server {

// The server end of one member's collective stream, as a round sees it.
// The round calls these through PendingCallbacks, never under its lock, from
// whatever thread changed the round.
class RoundStream {
 public:
  virtual ~RoundStream() = default;
  // WakeWriter: the round may have something for this stream to send. The
  // stream answers by calling RoundDataPlane::NextOutgoing when it is not
  // writing.
  virtual void WakeWriter() = 0;
  // ResumeReading: the round has buffer room again for a paused uploader.
  virtual void ResumeReading() = 0;
};

// What a stream should do next (RoundDataPlane::NextOutgoing).
struct Outgoing {
  enum class Kind {
    kNothing,          // wait for the next WakeWriter
    kFrame,            // write `frame`, then call WriteDone
    kCommitAndFinish,  // write `frame` (the commit) and finish with OK
    kFinish,           // finish the stream with `status`
  };
  Kind kind = Kind::kNothing;
  grpc::ByteBuffer frame;
  absl::Status status;
};

class RoundDataPlane {
 public:
  virtual ~RoundDataPlane() = default;

  // OfferChunk takes a chunk frame `rank` uploaded, carrying
  // `payload_bytes` bytes. Returns true when the uploader may read its next
  // frame now, false when it must wait for RoundStream::ResumeReading.
  virtual bool OfferChunk(int rank, grpc::ByteBuffer frame,
                          int64_t payload_bytes,
                          PendingCallbacks* callbacks) = 0;
  // OfferReduceChunk takes an ALL_REDUCE chunk of `rank`: `meta`, with
  // meta.size bytes at `data`, in `frame` as it arrived. Returns as
  // OfferChunk does.
  virtual bool OfferReduceChunk(int rank, const grpc::ByteBuffer& frame,
                                const ChunkMeta& meta, const uint8_t* data,
                                PendingCallbacks* callbacks) = 0;
  // EndContribution records that `rank`'s upload is complete, its bytes
  // hashing to `digest` (checked by the caller against the rank's claim).
  virtual void EndContribution(int rank, const Digest& digest,
                               PendingCallbacks* callbacks) = 0;

  // NextOutgoing tells `rank`'s stream what to do next.
  virtual Outgoing NextOutgoing(int rank, PendingCallbacks* callbacks) = 0;
  // WriteDone reports that `rank`'s last kFrame write finished; `ok` false
  // means its stream is broken.
  virtual void WriteDone(int rank, bool ok, PendingCallbacks* callbacks) = 0;

  // StreamLost reports that `rank`'s stream closed or was cancelled at
  // `now` (`why` names how), with `hasher` holding the hash of its upload so
  // far (none before its header), for a stream that resumes it. The stream
  // calls nothing afterwards.
  virtual void StreamLost(int rank, absl::string_view why, absl::Time now,
                          PendingCallbacks* callbacks,
                          std::optional<ContentHasher> hasher) = 0;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_CONTROL_ROUND_DATA_PLANE_H_
