#include "server/relay/fan_out_log.h"

#include <utility>

namespace fedgather::server {

FanOutLog::FanOutLog(FanOutLogOptions options)
    : options_(std::move(options)),
      cursors_(static_cast<size_t>(options_.world), 0) {}

int64_t FanOutLog::MaxFrames() const {
  return options_.max_buffered_bytes / kLogEntryBytes;
}

bool FanOutLog::HasRoom() const {
  return static_cast<int64_t>(entries_.size()) < MaxFrames();
}

bool FanOutLog::Append(int source, grpc::ByteBuffer frame,
                       int64_t payload_bytes, int receivers) {
  if (receivers == 0) return false;
  if (frame.Length() < kCompactFrameBytes) {
    grpc::Slice flat;
    if (frame.DumpToSingleSlice(&flat).ok()) frame = grpc::ByteBuffer(&flat, 1);
  }
  const int64_t charge = payload_bytes + kFrameChargeBytes;
  entries_.push_back(Entry{source, std::move(frame), charge, receivers});
  buffered_bytes_ += charge;
  return true;
}

void FanOutLog::MarkLastReplayed(int64_t journal_offset, int64_t journal_size) {
  entries_.back().journal_offset = journal_offset;
  entries_.back().journal_size = journal_size;
}

void FanOutLog::Spill(int64_t held_elsewhere) {
  while (buffered_bytes_ + held_elsewhere > options_.max_buffered_bytes &&
         spill_cursor_ < entries_.size()) {
    Entry& entry = entries_[spill_cursor_++];
    if (entry.journal_offset < 0 || entry.spilled ||
        entry.pending_writes == 0) {
      continue;
    }
    buffered_bytes_ -= entry.bytes;
    entry.bytes = 0;
    entry.frame.Clear();
    entry.spilled = true;
  }
}

int64_t FanOutLog::FrameBytes(const Entry& entry) {
  return entry.spilled ? entry.journal_size
                       : static_cast<int64_t>(entry.frame.Length());
}

const FanOutLog::Entry* FanOutLog::Next(int rank) {
  size_t& cursor = cursors_[rank];
  while (cursor < entries_.size() && entries_[cursor].source_rank == rank) {
    ++cursor;
  }
  return cursor < entries_.size() ? &entries_[cursor] : nullptr;
}

int64_t FanOutLog::Written(int rank, bool* released) {
  Entry& entry = entries_[cursors_[rank]++];
  const int64_t bytes = FrameBytes(entry);
  if (--entry.pending_writes == 0) {
    Release(entry);
    *released = true;
  }
  return bytes;
}

bool FanOutLog::DropClaims(int rank) {
  bool released = false;
  for (size_t& cursor = cursors_[rank]; cursor < entries_.size(); ++cursor) {
    Entry& entry = entries_[cursor];
    if (entry.source_rank != rank && --entry.pending_writes == 0) {
      Release(entry);
      released = true;
    }
  }
  return released;
}

bool FanOutLog::DropReceivers(int count) {
  bool released = false;
  for (Entry& entry : entries_) {
    if (entry.pending_writes == 0) continue;
    entry.pending_writes -= count;
    if (entry.pending_writes == 0) {
      Release(entry);
      released = true;
    }
  }
  return released;
}

int64_t FanOutLog::FramesFor(int rank) const {
  int64_t frames = 0;
  for (const Entry& entry : entries_) {
    if (entry.source_rank != rank) ++frames;
  }
  return frames;
}

std::optional<size_t> FanOutLog::ResumeCursor(int rank, uint64_t frames) const {
  // The frames sent to `rank` are the entries from other ranks, in order.
  uint64_t seen = 0;
  size_t cursor = 0;
  for (; cursor < entries_.size() && seen < frames; ++cursor) {
    if (entries_[cursor].source_rank != rank) ++seen;
  }
  if (seen < frames) return std::nullopt;
  return cursor;
}

std::optional<int64_t> FanOutLog::Reclaim(int rank, size_t cursor,
                                          bool* released) {
  // A write the old stream had in flight may have arrived: the client has
  // it, so its claim goes.
  for (size_t i = cursors_[rank]; i < cursor; ++i) {
    Entry& entry = entries_[i];
    if (entry.source_rank != rank && --entry.pending_writes == 0) {
      Release(entry);
      *released = true;
    }
  }
  // Frames the old stream wrote but the client never got: claim them
  // again, from the tail.
  int64_t resent = 0;
  for (size_t i = cursor; i < cursors_[rank]; ++i) {
    Entry& entry = entries_[i];
    if (entry.source_rank == rank) continue;
    if (entry.frame.Length() == 0 && !entry.spilled) return std::nullopt;
    if (entry.in_tail) {
      entry.in_tail = false;
      tail_bytes_ -= entry.bytes;
      buffered_bytes_ += entry.bytes;
    }
    ++entry.pending_writes;
    resent += FrameBytes(entry);
  }
  cursors_[rank] = cursor;
  return resent;
}

void FanOutLog::Release(Entry& entry) {
  buffered_bytes_ -= entry.bytes;
  if (!options_.keep_tail) {
    entry.bytes = 0;
    entry.frame.Clear();
    return;
  }
  entry.in_tail = true;
  tail_bytes_ += entry.bytes;
  tail_.push_back(static_cast<size_t>(&entry - entries_.data()));
  while (tail_bytes_ > options_.resume_window_bytes && !tail_.empty()) {
    Entry& oldest = entries_[tail_.front()];
    tail_.pop_front();
    if (!oldest.in_tail) continue;  // a resume claimed it again
    oldest.in_tail = false;
    tail_bytes_ -= oldest.bytes;
    oldest.bytes = 0;
    oldest.frame.Clear();
  }
}

void FanOutLog::ReleaseTail() {
  for (size_t index : tail_) {
    Entry& entry = entries_[index];
    if (!entry.in_tail) continue;
    entry.in_tail = false;
    entry.bytes = 0;
    entry.frame.Clear();
  }
  tail_.clear();
  tail_bytes_ = 0;
}

void FanOutLog::Clear() {
  for (Entry& entry : entries_) entry.frame.Clear();
  buffered_bytes_ = 0;
  tail_.clear();
  tail_bytes_ = 0;
}

}  // namespace fedgather::server
