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
// Failure policy (docs/security.md, "When the audit log cannot be written"):
// a failed write, fsync, anchor or rotation does not stop the log. status()
// turns to the error at once (the server then admits no joins or rounds),
// the record that failed and every record after it are kept, and the writer
// retries every `retry_period`, first cutting off any part of a line it had
// written. At most `max_queued_records` records wait in memory; records
// appended beyond that are dropped and counted. Once a retry succeeds the
// log writes what it kept, then one "audit_gap" record saying from when to
// when it could not write, the error, and how many records it dropped
// between which times; status() is OK again.
//
// Threads: Append, Flush, WaitUntilWritten, status and the counters may be
// called from any thread, including gRPC callback threads (Append only
// takes a short lock). The writer thread alone touches the file until
// Close, which stops it and then finishes the file itself.
#ifndef FEDGATHER_SERVER_OBSERVE_AUDIT_LOG_H_
#define FEDGATHER_SERVER_OBSERVE_AUDIT_LOG_H_

#include <sys/types.h>

#include <cstdint>
#include <deque>
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
#include "common/clock.h"
#include "server/events/contribution_digest.h"

namespace fedgather::server {

// One audit record before the log numbers, times and chains it. Unset
// optionals are written as null.
struct AuditRecord {
  // "join", "leave", "contribution", "commit", "abort", "denied", ... (free
  // text chosen by the caller; "anchor" is reserved for the log's own).
  std::string action;
  std::optional<std::string> identity, peer, group, op, digest_algorithm,
      digest_hex, reason;
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

// The calls the writer makes on the audit file, so that tests can make
// writes fail (ENOSPC, EIO) without a full disk. Each behaves like the system
// call it stands for: -1 with errno set on failure. Null: the system call.
struct AuditFileCalls {
  std::function<ssize_t(int fd, const void* data, size_t size)> write;
  std::function<int(int fd)> fsync;
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
  Clock* clock = SystemClock();
  // While writes fail, how often the writer tries again (> 0).
  absl::Duration retry_period = absl::Seconds(1);
  // The most records that may wait in memory to be written (>= 1); records
  // appended beyond it are dropped, counted, and reported by "audit_gap".
  size_t max_queued_records = 65536;
  AuditFileCalls file;
};

class AuditLog {
 public:
  // Open continues the chain of an existing `options.path` (its last record
  // gives the next seq and prev; when the file is missing or empty, the last
  // record of the newest `<path>.NNNNNN` does) or starts a new chain at seq 0,
  // then starts the writer thread. Audit files are created with mode 0600.
  //
  // An active file whose last line was cut off (a torn write: no '\n') is
  // verified up to it, renamed aside like a rotated file (the next
  // `<path>.NNNNNN`, the cut bytes kept), and the new file starts with an
  // "audit_tail_cut" record (common/audit_chain.h) chained to its last
  // intact record, naming the file and the bytes cut.
  //
  // INVALID_ARGUMENT for bad options or a signing key that does not parse;
  // FAILED_PRECONDITION, naming the file, when the file to continue is
  // damaged otherwise: its last line is whole but not a record, or a record
  // before a cut-off line does not verify (the operator should run
  // `fedgather audit verify` and move the file aside); errno-based codes,
  // naming the path, when a file cannot be opened or renamed.
  static absl::StatusOr<std::unique_ptr<AuditLog>> Open(
      AuditLogOptions options);

  // The destructor calls Close.
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Append queues `record`; it never blocks on I/O and is thread-safe.
  // Records are numbered in Append order. Records appended after Close, or
  // while max_queued_records wait, are dropped and counted in
  // records_dropped().
  void Append(AuditRecord record) ABSL_LOCKS_EXCLUDED(mu_);

  // Flush blocks until every record appended before the call is written (and
  // fsynced unless kOff) or dropped, or until writing fails, and returns
  // status(). For tests and shutdown; do not call it from a gRPC callback.
  absl::Status Flush() ABSL_LOCKS_EXCLUDED(mu_);

  // WaitUntilWritten blocks until every record appended before the call is
  // written or dropped (through failures and retries) and the log can
  // write, or until `timeout` passes; returns whether that happened. For
  // tests; not from a gRPC callback.
  bool WaitUntilWritten(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

  // Close appends no record of its own except, when signing, a final anchor
  // (unless the last record already is one), and the "audit_gap" record of
  // a failure its last try recovers from; it stops the writer thread, tries
  // once more to write everything kept, fsyncs and closes the file. What it
  // cannot write is dropped and counted, and the error returned. Idempotent:
  // later calls return the first call's result. Blocks on I/O.
  absl::Status Close() ABSL_LOCKS_EXCLUDED(mu_, close_mu_);

  // status is OK while the log can write, and the error of the writer's
  // latest try (naming the call and the file) while it cannot.
  absl::Status status() const ABSL_LOCKS_EXCLUDED(mu_);

  // records_written counts records written to the file (anchors excluded,
  // "audit_gap" records included); anchors_written counts anchors;
  // records_dropped counts appended records that were not written;
  // write_failures counts the times writing started to fail.
  uint64_t records_written() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t anchors_written() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t records_dropped() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t write_failures() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // What the log could not write: a failure (from when, until when, the
  // latest error) and records dropped (how many, the first's and the last's
  // append times). Reported by one "audit_gap" record.
  struct Gap {
    std::optional<absl::Time> failed_since, failed_until;
    absl::Status error;
    uint64_t dropped = 0;
    absl::Time first_dropped, last_dropped;
  };

  explicit AuditLog(AuditLogOptions options);

  void WriterLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // TakeQueuedLocked moves the queue to pending_, ending it with the
  // "audit_gap" record when there is a gap to report; only while writing
  // works.
  void TakeQueuedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropLocked(absl::Time appended) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // WriteAndReport writes pending_ and turns status() to the outcome.
  void WriteAndReport() ABSL_LOCKS_EXCLUDED(mu_);
  // The writer's steps. They touch the writer-owned state below: only the
  // writer thread calls them, or Close after joining it. Each leaves that
  // state true to the file when it fails, so that it can be tried again.
  absl::Status WritePending();
  absl::Status CutTornLine();
  absl::Status AnchorAndRotateIfDue();
  absl::Status WriteRecord(const AuditRecord& record);
  absl::Status WriteAnchor();
  absl::Status WriteLine(std::string line, bool is_anchor);
  absl::Status Rotate();
  absl::Status SyncFile();

  const AuditLogOptions options_;

  // Writer-owned: the writer thread while it runs, then Close.
  int fd_ = -1;
  uint64_t next_seq_ = 0;
  std::string prev_hash_;
  int64_t file_size_ = 0;  // bytes of whole lines in the active file
  bool torn_ = false;      // a failed write left part of a line after them
  bool unsynced_ = false;  // lines written since the last fsync
  int since_anchor_ = 0;   // non-anchor records since the last anchor
  bool last_is_anchor_ = false;
  uint64_t next_rotation_ = 1;       // the next `<path>.NNNNNN` to try
  std::deque<AuditRecord> pending_;  // taken from the queue, not yet written
  uint64_t unreported_writes_ = 0;   // written, not yet in written_

  std::thread writer_;

  mutable absl::Mutex mu_;
  std::vector<AuditRecord> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t appended_ ABSL_GUARDED_BY(mu_) = 0;   // records queued or dropped
  uint64_t processed_ ABSL_GUARDED_BY(mu_) = 0;  // written or dropped
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t anchors_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t failures_ ABSL_GUARDED_BY(mu_) = 0;
  Gap gap_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);

  absl::Mutex close_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  bool closed_ ABSL_GUARDED_BY(close_mu_) = false;
  absl::Status close_status_ ABSL_GUARDED_BY(close_mu_);
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_OBSERVE_AUDIT_LOG_H_
