// FanOutLog: the frames of one relay round, each kept once and written by
// every receiver from it (cut-through fan-out, no copy per receiver), with
// one cursor per rank, the resume tail, and the count of the bytes it holds.
//
// A frame is appended with the number of receivers that must write it; each
// receiver's stream walks the log with its own cursor, skipping the frames
// its rank sent. When every receiver has written a frame it is released: its
// bytes stop counting as buffered, and it moves to the resume tail (when the
// log keeps one) or is freed. The tail keeps at most resume_window_bytes of
// released frames, so a receiver whose stream broke can claim again the
// frames its old stream wrote but the client never got (Reclaim).
//
// Every frame is charged its payload bytes plus kFrameChargeBytes; that is
// what buffered_bytes counts and what the round's limit bounds. The log's
// entries outlive their frames (a resume finds its place by them), so the
// log takes at most max_buffered_bytes / kLogEntryBytes frames (HasRoom).
// A frame replayed from a journal may leave memory (Spill): its entry then
// says where in the journal it lies, and the owner reads it back.
//
// Thread safety: none; the owner (Round) calls it under its own lock. It
// calls nothing back: the methods that release frames return whether they
// did, so the owner can resume paused uploaders.
#ifndef FEDGATHER_SERVER_RELAY_FAN_OUT_LOG_H_
#define FEDGATHER_SERVER_RELAY_FAN_OUT_LOG_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace fedgather::server {

struct FanOutLogOptions {
  int world = 0;  // ranks, each with a cursor
  // What the frames may hold; the log takes max_buffered_bytes /
  // kLogEntryBytes frames.
  int64_t max_buffered_bytes = 256 << 20;
  // Whether released frames are kept in a resume tail of at most
  // resume_window_bytes (charged bytes), or freed at once.
  bool keep_tail = false;
  int64_t resume_window_bytes = int64_t{32} << 20;
};

class FanOutLog {
 public:
  // Charged per frame beyond its bytes: the entry, the gRPC byte buffer and
  // slice around it (about 400 bytes measured; issue 18).
  static constexpr int64_t kFrameChargeBytes = 1024;
  // Smaller frames are copied out of the transport's read buffers, which
  // they would otherwise keep alive, so that the charge covers them.
  static constexpr size_t kCompactFrameBytes = 4096;
  // What an entry costs once its frame is released.
  static constexpr int64_t kLogEntryBytes = 64;
  // The source of a frame for every rank (an all_reduce result).
  static constexpr int kEveryRank = -1;

  struct Entry {
    int source_rank;
    grpc::ByteBuffer frame;
    int64_t bytes;         // its charge, while buffered or in the tail
    int pending_writes;    // receivers that have not written it yet
    bool in_tail = false;  // written by all, kept for resumes
    // A replayed frame that left memory: its bytes lie in the journal.
    bool spilled = false;
    int64_t journal_offset = -1;  // replayed frames: where they lie
    int64_t journal_size = 0;     // and their length
  };

  explicit FanOutLog(FanOutLogOptions options);

  // HasRoom is true while the log may take one more frame; MaxFrames is
  // how many it takes.
  bool HasRoom() const;
  int64_t MaxFrames() const;
  size_t size() const { return entries_.size(); }

  // Append adds `frame` from `source` (a rank, or kEveryRank), carrying
  // `payload_bytes`, for `receivers` receivers; a frame for no receiver is
  // dropped (false).
  bool Append(int source, grpc::ByteBuffer frame, int64_t payload_bytes,
              int receivers);
  // MarkLastReplayed says the last frame appended lies in the journal at
  // `journal_offset`, `journal_size` bytes long, so Spill may drop it.
  void MarkLastReplayed(int64_t journal_offset, int64_t journal_size);
  // Spill drops replayed frames from memory, oldest first, while
  // buffered_bytes plus `held_elsewhere` is over max_buffered_bytes.
  void Spill(int64_t held_elsewhere);

  // Next is the frame `rank`'s cursor is at, skipping the frames `rank`
  // sent; null at the end of the log.
  const Entry* Next(int rank);
  // Written moves `rank`'s cursor past the frame Next returned, which its
  // stream has written (or failed to), and returns that frame's length.
  // `released` is set when that was its last receiver.
  int64_t Written(int rank, bool* released);
  // DropClaims gives up `rank`'s claims on the frames it has not written;
  // true when that released any.
  bool DropClaims(int rank);
  // DropReceivers takes `count` receivers off every frame still pending
  // (ranks a quorum shut out); true when that released any.
  bool DropReceivers(int count);
  // FramesFor is how many frames the log holds for `rank` (from others).
  int64_t FramesFor(int rank) const;

  // ResumeCursor is the entry after the first `frames` frames sent to
  // `rank`; nullopt when the log has fewer.
  std::optional<size_t> ResumeCursor(int rank, uint64_t frames) const;
  // Reclaim moves `rank`'s cursor to `cursor` for the stream that resumes
  // it: the frames before it that the old stream had not written are
  // delivered (released, when last; `released` is set), and the frames
  // from it that the old stream wrote are claimed again, out of the tail.
  // Returns the bytes of those frames, or nullopt (the cursor unchanged)
  // when one of them was already freed.
  std::optional<int64_t> Reclaim(int rank, size_t cursor, bool* released);

  // HasTail is true while the resume tail holds frames; ReleaseTail frees
  // them.
  bool HasTail() const { return !tail_.empty(); }
  void ReleaseTail();
  // Clear frees every frame (a failed round); the entries stay.
  void Clear();

  // BufferedBytes is the charge of the frames some receiver has not
  // written; TailBytes that of the resume tail.
  int64_t BufferedBytes() const { return buffered_bytes_; }
  int64_t TailBytes() const { return tail_bytes_; }

  // FrameBytes is the length of `entry`'s frame, in memory or spilled.
  static int64_t FrameBytes(const Entry& entry);

 private:
  // Release: every receiver has written `entry`.
  void Release(Entry& entry);

  const FanOutLogOptions options_;
  std::vector<Entry> entries_;
  std::vector<size_t> cursors_;  // by rank: the next entry it looks at
  int64_t buffered_bytes_ = 0;
  // Resume tail: indexes of released frames still held, oldest first, and
  // their charge (at most resume_window_bytes).
  std::deque<size_t> tail_;
  int64_t tail_bytes_ = 0;
  size_t spill_cursor_ = 0;  // Spill looks on from here
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_RELAY_FAN_OUT_LOG_H_
