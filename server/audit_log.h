// AuditLog: the server's tamper-evident audit trail. Callers append records
// from any thread; one writer thread numbers, times and hash-chains them into
// a JSON-lines file in the format of common/audit_chain.h, signs the chain
// head every `anchor_every` records, and rotates the file by size.
//
// Rotation renames the active file to `<path>.000001`, `<path>.000002`, ...
// (the next unused number) and continues the same chain in a new `<path>`,
// so `fedgather audit verify <path>.000001 <path>.000002 <path>` verifies
// the whole history as one chain.
//
// Threads: Append, Flush, status and records_written may be called from any
// thread, including gRPC callback threads. The writer thread alone touches
// the file until Close, which stops it and then finishes the file itself.
#ifndef FEDGATHER_SERVER_AUDIT_LOG_H_
#define FEDGATHER_SERVER_AUDIT_LOG_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/contribution_digest.h"

namespace fedgather::server {

// One audit record before the log numbers, times and chains it. Unset
// optionals are written as null.
struct AuditRecord {
  // "join", "leave", "contribution", "commit", "abort", "denied", ... (free
  // text chosen by the caller; "anchor" is reserved for the log's own).
  std::string action;
  std::optional<std::string> identity, peer, group, op, sha256_hex, reason;
  std::optional<uint64_t> epoch, collective_seq;
  std::optional<int> rank;
  std::optional<int64_t> bytes;
  std::vector<ContributionDigest> digests;  // written as null when empty
  std::string outcome =
      "OK";  // absl status code name, e.g. "PERMISSION_DENIED"
  // Extra key/values (string values), written in this order; null when empty.
  std::vector<std::pair<std::string, std::string>> details;
  // When it happened; Append stamps it, so record times follow seq order.
  absl::Time time;
};

enum class AuditFsync {
  kEveryRecord,  // fsync after each record
  kGroupCommit,  // fsync once per batch the writer drains from the queue
  kOff,          // fsync only at rotation and Close
};

struct AuditLogOptions {
  std::string path;  // the active file
  AuditFsync fsync = AuditFsync::kGroupCommit;
  // Rotate once the active file reaches this size (it may exceed it by one
  // record and one anchor). 0: never rotate.
  int64_t rotate_bytes = 64 << 20;
  // PEM private key that signs anchors (the server's key). Empty: no anchors.
  std::string signing_key_pem;
  // Non-anchor records between anchors when signing (>= 1).
  int anchor_every = 1000;
  // The time stamped on records (called by Append, on the caller's thread)
  // and on anchors (called on the writer thread). Must be thread-safe.
  std::function<absl::Time()> clock = absl::Now;
};

class AuditLog {
 public:
  // Open continues the chain of an existing `options.path` (its last record
  // gives the next seq and prev; when the file is missing or empty, the last
  // record of the newest `<path>.NNNNNN` does) or starts a new chain at seq 0,
  // then starts the writer thread. Audit files are created with mode 0600.
  // INVALID_ARGUMENT for bad options or a signing key that does not parse;
  // FAILED_PRECONDITION, naming the file, when the last line of the file to
  // continue is truncated or not a record (the operator should run `fedgather
  // audit verify` and move the file aside); errno-based codes, naming the
  // path, when the file cannot be opened.
  static absl::StatusOr<std::unique_ptr<AuditLog>> Open(
      AuditLogOptions options);

  // The destructor calls Close.
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Append queues `record`; it never blocks on I/O and is thread-safe.
  // Records are numbered in Append order. After Close, or once a write has
  // failed, records are dropped and counted in records_dropped().
  void Append(AuditRecord record) ABSL_LOCKS_EXCLUDED(mu_);

  // Flush blocks until every record appended before the call is written (and
  // fsynced unless kOff) or dropped, and returns status(). For tests and
  // shutdown; do not call it from a gRPC callback.
  absl::Status Flush() ABSL_LOCKS_EXCLUDED(mu_);

  // Close appends no record of its own except, when signing, a final anchor
  // (unless the last record already is one); it writes everything queued,
  // fsyncs, stops the writer thread and closes the file. Idempotent: later
  // calls return the first call's result. Blocks on I/O.
  absl::Status Close() ABSL_LOCKS_EXCLUDED(mu_, close_mu_);

  // status returns the writer's first error, which sticks: after it, records
  // are dropped. OK while every write succeeded.
  absl::Status status() const ABSL_LOCKS_EXCLUDED(mu_);

  // records_written counts appended records written to the file (anchors
  // excluded); anchors_written counts anchors; records_dropped counts
  // appended records that were not written.
  uint64_t records_written() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t anchors_written() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t records_dropped() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit AuditLog(AuditLogOptions options);

  void WriterLoop();
  // The writer's steps. They touch the writer-owned state below: only the
  // writer thread calls them, or Close after joining it.
  absl::Status WriteRecord(const AuditRecord& record);
  absl::Status WriteAnchor();
  absl::Status WriteLine(std::string line, bool is_anchor);
  absl::Status Rotate();
  absl::Status SyncFile();
  void Fail(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);

  const AuditLogOptions options_;

  // Writer-owned: the writer thread while it runs, then Close.
  int fd_ = -1;
  uint64_t next_seq_ = 0;
  std::string prev_hash_;
  int64_t file_size_ = 0;
  int since_anchor_ = 0;  // non-anchor records since the last anchor
  bool last_is_anchor_ = false;
  uint64_t next_rotation_ = 1;  // the next `<path>.NNNNNN` to try
  bool failed_ = false;         // a write failed; status_ says why

  std::thread writer_;

  mutable absl::Mutex mu_;
  std::vector<AuditRecord> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t appended_ ABSL_GUARDED_BY(mu_) = 0;   // Append calls
  uint64_t processed_ ABSL_GUARDED_BY(mu_) = 0;  // written or dropped
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t anchors_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);

  absl::Mutex close_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  bool closed_ ABSL_GUARDED_BY(close_mu_) = false;
  absl::Status close_status_ ABSL_GUARDED_BY(close_mu_);
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_AUDIT_LOG_H_
