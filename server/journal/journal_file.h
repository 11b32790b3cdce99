// JournalFile: an append-only file of checksummed records, the unit of the
// server's durable state (--state-dir). Each record is a kind, a rank and a
// payload:
//   u32 payload_size | u8 kind | u32 rank | payload | u32 crc32
// (little-endian; the CRC-32 covers kind, rank and payload). The file opens
// with the 8-byte magic "FGJRNL1\n". A reader stops at the first torn or
// corrupt record: a crash mid-append loses that record and nothing before it,
// and a reopened journal appends after the last intact record.
//
// Durability: Append hands the bytes to the kernel (write(2)), so they
// survive the server process dying (kill -9); Sync (fdatasync) makes them
// survive the machine losing power. Callers decide when to Sync.
//
// Thread safety: none; callers serialize access to one JournalFile.
#ifndef FEDGATHER_SERVER_JOURNAL_JOURNAL_FILE_H_
#define FEDGATHER_SERVER_JOURNAL_JOURNAL_FILE_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fedgather::server {

struct JournalRecord {
  uint8_t kind = 0;
  uint32_t rank = 0;
  std::string payload;
  int64_t payload_offset = 0;  // where the payload lies in the file (ReadAt)
};

class JournalFile {
 public:
  // Create makes a new, empty journal at `path`, replacing any file there.
  static absl::StatusOr<std::unique_ptr<JournalFile>> Create(
      const std::string& path);
  // OpenForAppend opens the journal at `path` to append after its first
  // `valid_bytes` bytes (what ReadJournal returned), cutting a torn tail.
  static absl::StatusOr<std::unique_ptr<JournalFile>> OpenForAppend(
      const std::string& path, int64_t valid_bytes);
  ~JournalFile();
  JournalFile(const JournalFile&) = delete;
  JournalFile& operator=(const JournalFile&) = delete;

  // Append writes one record; the payload is a frame's bytes or a string.
  // Errors name the file and the cause (e.g. "No space left on device").
  absl::Status Append(uint8_t kind, uint32_t rank,
                      const grpc::ByteBuffer& payload);
  absl::Status Append(uint8_t kind, uint32_t rank, absl::string_view payload);
  // Sync makes every record appended so far durable (fdatasync).
  absl::Status Sync();
  // ReadAt reads back `size` bytes at `offset` (a record's payload_offset);
  // DATA_LOSS naming the file when they cannot all be read.
  absl::StatusOr<grpc::ByteBuffer> ReadAt(int64_t offset, int64_t size) const;

  const std::string& path() const { return path_; }

 private:
  JournalFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  absl::Status AppendPieces(uint8_t kind, uint32_t rank,
                            const std::vector<absl::string_view>& pieces);

  const std::string path_;
  const int fd_;
};

// ReadJournal calls `each` with every intact record of the journal at
// `path`, in order, and returns the length of the intact prefix (for
// OpenForAppend). It stops quietly at a torn or corrupt record. Errors:
// the file cannot be read, it is not a journal (no magic), or `each`
// returned an error (which is passed on).
absl::StatusOr<int64_t> ReadJournal(
    const std::string& path,
    const std::function<absl::Status(JournalRecord record)>& each);

// SyncDirectory makes the entries of directory `path` (files created,
// renamed or removed in it) durable.
absl::Status SyncDirectory(const std::string& path);

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_JOURNAL_JOURNAL_FILE_H_
