#include "client/peer/ring_all_gather.h"

#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace fedgather {
namespace {

void PutBigEndian(uint64_t value, int bytes, char* out) {
  for (int i = bytes - 1; i >= 0; --i) {
    out[i] = static_cast<char>(value & 0xff);
    value >>= 8;
  }
}

uint64_t GetBigEndian(const char* in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value = (value << 8) | static_cast<unsigned char>(in[i]);
  }
  return value;
}

// One received chunk that the sender is to pass on.
struct Piece {
  int part;
  size_t offset;  // in `out`
  size_t size;
};

// What the receiving and the sending side share during one call.
class Exchange {
 public:
  Exchange(PeerLink* to_next, PeerLink* from_prev)
      : to_next_(to_next), from_prev_(from_prev) {}

  void Push(Piece piece) {
    absl::MutexLock lock(&mu_);
    pieces_.push_back(piece);
  }
  // Pop waits for the next piece; false when the call failed.
  bool Pop(Piece* piece) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](Exchange* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) {
          return !e->pieces_.empty() || !e->first_error_.ok();
        },
        this));
    if (!first_error_.ok()) return false;
    *piece = pieces_.front();
    pieces_.pop_front();
    return true;
  }
  // Fail records the first error and breaks both links, so that the other
  // side stops too.
  void Fail(absl::Status status) {
    {
      absl::MutexLock lock(&mu_);
      if (!first_error_.ok()) return;
      first_error_ = std::move(status);
    }
    to_next_->Abort();
    from_prev_->Abort();
  }
  absl::Status first_error() {
    absl::MutexLock lock(&mu_);
    return first_error_;
  }

 private:
  PeerLink* const to_next_;
  PeerLink* const from_prev_;
  absl::Mutex mu_;
  std::deque<Piece> pieces_ ABSL_GUARDED_BY(mu_);
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

absl::Status SendChunk(PeerLink* link, const RingAllGatherOptions& options,
                       int part, const char* data, size_t size) {
  char header[kRingChunkHeaderBytes];
  PutBigEndian(options.op, 8, header);
  PutBigEndian(static_cast<uint64_t>(part), 4, header + 8);
  PutBigEndian(size, 4, header + 12);
  const absl::Time deadline = absl::Now() + options.stall_timeout;
  absl::Status status =
      link->Send(absl::string_view(header, sizeof header), deadline);
  if (status.ok()) status = link->Send(absl::string_view(data, size), deadline);
  return status;
}

}  // namespace

absl::Status RingAllGather(int rank, absl::Span<const size_t> part_sizes,
                           const char* mine, char* out, PeerLink* to_next,
                           PeerLink* from_prev,
                           const RingAllGatherOptions& options) {
  const int world = static_cast<int>(part_sizes.size());
  if (rank < 0 || rank >= world || options.chunk_bytes == 0 ||
      options.chunk_bytes > (size_t{1} << 31)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring all_gather: rank ", rank, " of ", world,
                     ", chunks of ", options.chunk_bytes, " bytes"));
  }
  std::vector<size_t> offsets(world + 1, 0);
  for (int p = 0; p < world; ++p) offsets[p + 1] = offsets[p] + part_sizes[p];
  if (mine != out + offsets[rank] && part_sizes[rank] > 0) {
    std::memcpy(out + offsets[rank], mine, part_sizes[rank]);
  }
  if (world == 1) return absl::OkStatus();

  const int next = (rank + 1) % world;
  // Parts this rank passes on: every part but its own and its successor's.
  size_t to_forward = 0;
  for (int p = 0; p < world; ++p) {
    if (p != rank && p != next) to_forward += part_sizes[p];
  }
  Exchange exchange(to_next, from_prev);
  std::thread sender([&] {
    const size_t chunk = options.chunk_bytes;
    std::string copy;
    for (size_t at = 0; at < part_sizes[rank]; at += chunk) {
      const size_t n = std::min(chunk, part_sizes[rank] - at);
      absl::Status status =
          SendChunk(to_next, options, rank, out + offsets[rank] + at, n);
      if (!status.ok()) return exchange.Fail(status);
    }
    for (size_t sent = 0; sent < to_forward;) {
      Piece piece;
      if (!exchange.Pop(&piece)) return;
      const char* data = out + piece.offset;
      if (options.forward_hook) {
        copy.assign(data, piece.size);
        options.forward_hook(piece.part, copy.data(), copy.size());
        data = copy.data();
      }
      absl::Status status =
          SendChunk(to_next, options, piece.part, data, piece.size);
      if (!status.ok()) return exchange.Fail(status);
      sent += piece.size;
    }
  });

  for (int k = 1; k < world; ++k) {
    const int part = (rank - k + world) % world;
    const bool forward = part != next;
    for (size_t at = 0; at < part_sizes[part];) {
      const size_t due = std::min(options.chunk_bytes, part_sizes[part] - at);
      char header[kRingChunkHeaderBytes];
      const absl::Time deadline = absl::Now() + options.stall_timeout;
      absl::Status status = from_prev->Receive(header, sizeof header, deadline);
      if (status.ok()) {
        const uint64_t op = GetBigEndian(header, 8);
        const uint64_t got_part = GetBigEndian(header + 8, 4);
        const uint64_t size = GetBigEndian(header + 12, 4);
        if (op != options.op || got_part != static_cast<uint64_t>(part) ||
            size != due) {
          status = absl::DataLossError(absl::StrCat(
              from_prev->name(), ": a chunk of op ", op, ", part ", got_part,
              ", ", size, " bytes came where op ", options.op, ", part ", part,
              ", ", due, " bytes at offset ", at, " was due"));
        }
      }
      char* into = out + offsets[part] + at;
      if (status.ok()) status = from_prev->Receive(into, due, deadline);
      if (!status.ok()) {
        exchange.Fail(status);
        sender.join();
        return exchange.first_error();
      }
      if (forward) exchange.Push({part, offsets[part] + at, due});
      at += due;
    }
  }
  sender.join();
  return exchange.first_error();
}

}  // namespace fedgather
