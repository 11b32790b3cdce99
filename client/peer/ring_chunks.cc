#include "client/peer/ring_chunks.h"

#include <utility>

#include "absl/strings/str_cat.h"

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

}  // namespace

void RingExchange::Push(RingPiece piece) {
  absl::MutexLock lock(&mu_);
  pieces_.push_back(piece);
}

bool RingExchange::Pop(RingPiece* piece) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](RingExchange* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) {
        return !e->pieces_.empty() || !e->first_error_.ok();
      },
      this));
  if (!first_error_.ok()) return false;
  *piece = pieces_.front();
  pieces_.pop_front();
  return true;
}

void RingExchange::Fail(absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    if (!first_error_.ok()) return;
    first_error_ = std::move(status);
  }
  to_next_->Abort();
  from_prev_->Abort();
}

absl::Status RingExchange::first_error() {
  absl::MutexLock lock(&mu_);
  return first_error_;
}

absl::Status SendRingChunk(PeerLink* link, const RingOptions& options, int part,
                           const char* data, size_t size) {
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

void ForwardRingPieces(PeerLink* link, const RingOptions& options,
                       RingExchange* exchange, const char* base, size_t bytes) {
  std::string copy;
  for (size_t sent = 0; sent < bytes;) {
    RingPiece piece;
    if (!exchange->Pop(&piece)) return;
    const char* data = base + piece.offset;
    if (options.forward_hook) {
      copy.assign(data, piece.size);
      options.forward_hook(piece.part, copy.data(), copy.size());
      data = copy.data();
    }
    absl::Status status =
        SendRingChunk(link, options, piece.part, data, piece.size);
    if (!status.ok()) return exchange->Fail(status);
    sent += piece.size;
  }
}

absl::Status ReceiveRingChunk(PeerLink* link, const RingOptions& options,
                              int part, size_t due, size_t at, char* into) {
  char header[kRingChunkHeaderBytes];
  const absl::Time deadline = absl::Now() + options.stall_timeout;
  absl::Status status = link->Receive(header, sizeof header, deadline);
  if (!status.ok()) return status;
  const uint64_t op = GetBigEndian(header, 8);
  const uint64_t got_part = GetBigEndian(header + 8, 4);
  const uint64_t size = GetBigEndian(header + 12, 4);
  if (op != options.op || got_part != static_cast<uint64_t>(part) ||
      size != due) {
    return absl::DataLossError(
        absl::StrCat(link->name(), ": a chunk of op ", op, ", part ", got_part,
                     ", ", size, " bytes came where op ", options.op, ", part ",
                     part, ", ", due, " bytes at offset ", at, " was due"));
  }
  return link->Receive(into, due, deadline);
}

}  // namespace fedgather
