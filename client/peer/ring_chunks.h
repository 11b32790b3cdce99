// RingChunks: what the ring algorithms over peer links (RingAllGather,
// client/peer/ring_all_gather.h; RingAllReduce, client/peer/ring_all_reduce.h)
// share (docs/protocol.md, "Peer links"): the options of one op, how a
// chunk is framed on a link, and the hand-over of received chunks from the
// receiving thread to the sending one.
//
// On a link, one chunk is a 16-byte header (the op's number, 8 bytes; the
// part's number, 4 bytes; the chunk's length, 4 bytes; all big-endian),
// then that many bytes. Both ends know, before the op, which chunk is due
// next; the receiver checks each header against it and fails with
// DATA_LOSS naming the link otherwise.
#ifndef FEDGATHER_CLIENT_PEER_RING_CHUNKS_H_
#define FEDGATHER_CLIENT_PEER_RING_CHUNKS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/peer/peer_link.h"

namespace fedgather {

// The size of a ring chunk's header on a link.
inline constexpr size_t kRingChunkHeaderBytes = 16;

// The options of one ring op.
struct RingOptions {
  uint64_t op = 0;  // the op's number; every chunk header carries it
  size_t chunk_bytes = size_t{1} << 20;
  // A link that moves no chunk for this long fails the op.
  absl::Duration stall_timeout = absl::Seconds(5);
  // Tests only: sees each chunk this rank forwards (a part it received,
  // or a partial reduction it added to), before it is sent, as a copy of
  // the bytes; may change it.
  std::function<void(int part, char* data, size_t size)> forward_hook;
};

// One received chunk that the sender is to pass on: `size` bytes at
// `offset` of the op's buffer, of part `part`.
struct RingPiece {
  int part;
  size_t offset;
  size_t size;
};

// What the receiving and the sending thread of one op share: the pieces
// to forward, in order, and the op's first error.
class RingExchange {
 public:
  RingExchange(PeerLink* to_next, PeerLink* from_prev)
      : to_next_(to_next), from_prev_(from_prev) {}

  void Push(RingPiece piece);
  // Pop waits for the next piece; false when the op failed.
  bool Pop(RingPiece* piece);
  // Fail records the first error and breaks both links, so that the other
  // thread (and the neighbours) stop too.
  void Fail(absl::Status status);
  absl::Status first_error();

 private:
  PeerLink* const to_next_;
  PeerLink* const from_prev_;
  absl::Mutex mu_;
  std::deque<RingPiece> pieces_ ABSL_GUARDED_BY(mu_);
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

// SendRingChunk sends one chunk of part `part`: `size` bytes at `data`.
absl::Status SendRingChunk(PeerLink* link, const RingOptions& options, int part,
                           const char* data, size_t size);

// ForwardRingPieces sends the pieces `exchange` hands over, from the
// buffer at `base` (through the forward hook when there is one), until
// `bytes` in all have gone or the op failed; a send that fails fails the
// op. The sending thread's second half in every ring algorithm.
void ForwardRingPieces(PeerLink* link, const RingOptions& options,
                       RingExchange* exchange, const char* base, size_t bytes);

// ReceiveRingChunk receives the chunk due next, of part `part` and `due`
// bytes (at byte `at` of the part, for the error), into `into`.
absl::Status ReceiveRingChunk(PeerLink* link, const RingOptions& options,
                              int part, size_t due, size_t at, char* into);

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_PEER_RING_CHUNKS_H_
