// The tamper-evident audit chain: the record format shared by the server's
// writer (server/observe/audit_log.h) and `fedgather audit verify`.
//
// An audit file is JSON lines: each record is one UTF-8 JSON object on one
// line, terminated by '\n'. Every record has these keys, in this order:
//
//   seq, time, identity, peer, action, group, epoch, collective_seq, rank,
//   op, bytes, digest_algorithm, digest, digests, outcome, reason, details,
//   [sig], prev
//
// Fields that do not apply are JSON null, so the schema is uniform.
// `digest_algorithm` ("blake3" or "sha256") names the hash of `digest` (a
// contribution's, or an all_reduce result's) and of each `digests` entry
// ({rank, identity, digest, bytes}, a commit's contributions); it is null
// when the record has neither. Records written before digests named their
// algorithm have one key `sha256` in place of `digest_algorithm, digest`,
// and `sha256` in their `digests` entries: every digest in them is a
// SHA-256. The verifier accepts both, in one chain. The chain itself
// (`prev`, anchors) is always SHA-256. `seq`
// counts from 0 and continues across rotated files. `time` is UTC RFC3339
// with microseconds ("2026-12-02T14:45:27.123456Z"). `prev` is
// AuditLineHash of the previous record's exact line (without its '\n'); the
// first record of a chain (seq 0) has prev = 64 '0' characters.
//
// Anchor records (action "anchor") sign the chain head: their `details` is
// {"head_seq": seq - 1} and `sig` (present only on anchors) is the base64 of
// a signature by the server's private key over AuditAnchorMessage(seq, prev)
// of the anchor itself. As `prev` names the record before it, and each record
// names its own predecessor, one signature covers the whole chain before it.
//
// A log rotated into `audit.jsonl.000001`, `audit.jsonl.000002`, ... and the
// active `audit.jsonl` is one chain: verify it by giving the files oldest
// first, e.g. `fedgather audit verify audit.jsonl.000001 audit.jsonl.000002
// audit.jsonl`.
//
// The functions keep no state and may be called from any thread.
#ifndef FEDGATHER_COMMON_AUDIT_CHAIN_H_
#define FEDGATHER_COMMON_AUDIT_CHAIN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace fedgather {

// The `prev` of the first record of a chain: 64 '0' characters.
inline constexpr absl::string_view kAuditGenesisPrev =
    "0000000000000000000000000000000000000000000000000000000000000000";

// The `action` of anchor records.
inline constexpr absl::string_view kAuditAnchorAction = "anchor";

// The `action` of the record that starts a file after a cut-off one: when
// the server starts on an active file whose last line was cut off (a torn
// write), it moves the file aside as a rotated file and begins the next one
// with this record, chained to the last intact record. Its `details` are
// {"file": the cut file's base name, "cut_bytes": the bytes of the cut line
// (decimal), "after_seq": the last intact record's seq}.
inline constexpr absl::string_view kAuditTailCutAction = "audit_tail_cut";

// AuditLineHash returns the lowercase hex SHA-256 of `line`, which must be a
// record's exact bytes without the terminating '\n'.
std::string AuditLineHash(absl::string_view line);

// FormatAuditTime renders `time` as UTC RFC3339 with microseconds, e.g.
// "2026-12-02T14:45:27.123456Z".
std::string FormatAuditTime(absl::Time time);

// AuditAnchorMessage returns the exact ASCII string an anchor signs:
// "fedgather-audit-anchor-v1 seq=<seq> prev=<prev_hex>".
std::string AuditAnchorMessage(uint64_t seq, absl::string_view prev_hex);

// SignAnchor signs AuditAnchorMessage(seq, prev_hex) with the PEM private key
// `key_pem` (EC and RSA keys sign a SHA-256 digest, DER-encoded for ECDSA;
// Ed25519/Ed448 keys sign the message itself) and returns the base64
// signature. INVALID_ARGUMENT when `key_pem` is not a private key; INTERNAL,
// with OpenSSL's error text, when signing fails.
absl::StatusOr<std::string> SignAnchor(const std::string& key_pem, uint64_t seq,
                                       absl::string_view prev_hex);

// VerifyAnchor checks that `sig_b64` is a signature made by SignAnchor for
// (seq, prev_hex) with the key of the PEM certificate `cert_pem`.
// INVALID_ARGUMENT when `cert_pem` does not parse; DATA_LOSS when `sig_b64`
// is not base64 or the signature does not verify.
absl::Status VerifyAnchor(const std::string& cert_pem, uint64_t seq,
                          absl::string_view prev_hex,
                          absl::string_view sig_b64);

// The last record of an audit file, as a writer needs it to continue the
// chain.
struct AuditChainHead {
  uint64_t seq = 0;
  std::string hash;        // AuditLineHash of the record's line
  bool is_anchor = false;  // whether the record is an anchor
};

// ReadAuditChainHead reads the last record of the audit file at `path`,
// reading backwards from the end (not the whole file). Returns nullopt for
// an empty file. NOT_FOUND (and others following errno) when the file cannot
// be opened; FAILED_PRECONDITION, naming the file, when its last line lacks
// its '\n' (a torn write) or is not a record.
absl::StatusOr<std::optional<AuditChainHead>> ReadAuditChainHead(
    const std::string& path);

struct AuditVerifyOptions {
  // PEM certificate of the server whose key signed the anchors. Empty: no
  // signature is checked (only the hash chain).
  std::string server_cert_pem;
  // With a certificate, accept records after the last anchor. By default the
  // last record must be a verified anchor, which catches a tail rewritten
  // with a valid chain but no signature, and truncation at a line boundary.
  bool allow_unsigned_tail = false;
  // Accept a last file whose last line was cut off (no '\n'): the records
  // before it are verified and the cut is reported in cut_tail_bytes. For
  // the writer, which then sets the file aside; off for operators.
  bool allow_cut_tail = false;
};

struct AuditVerifyReport {
  uint64_t records = 0;    // records read
  uint64_t first_seq = 0;  // > 0 when older rotated files were not given
  uint64_t last_seq = 0;
  uint64_t anchors = 0;  // anchor records (verified when a cert was given)
  // A certificate was given and the last record is an anchor that verified.
  bool signed_to_end = false;
  // The last record read (valid when records > 0).
  AuditChainHead last;
  // With allow_cut_tail: the bytes of the last file's cut-off last line.
  uint64_t cut_tail_bytes = 0;
  // Each file that ends in a cut-off line followed, in the next file, by
  // its kAuditTailCutAction record, e.g. "audit.jsonl.000003: 41 bytes cut
  // off after record 17, recorded by record 18".
  std::vector<std::string> cut_tails;
};

// VerifyAuditFiles checks that `paths`, in the order given (rotated files
// oldest first, then the active file), hold one intact chain. It streams the
// files, holding at most two lines at once. A chain that starts at seq > 0
// (older files not given) is accepted and reported through first_seq; the
// prev of its first record cannot be checked.
//
// On failure the message starts with "record N" (N: the record's seq, or the
// seq expected at that position), names the file and line, and says why:
//   DATA_LOSS for tampering or corruption: a record altered (the next
//     record's prev does not match its hash), missing (seq jumps),
//     reordered, duplicated or inserted, malformed or unparseable, a
//     truncated last record (no '\n' or does not parse; a file's cut-off
//     last line is accepted only when the next file starts with the
//     kAuditTailCutAction record that names it, its size and the record
//     before it, or with allow_cut_tail at the very end), a first record of
//     seq 0 whose prev is not all zeros, an anchor whose signature does not
//     verify, or (with a certificate and without allow_unsigned_tail)
//     records after the last anchor ("records A..B after the last signed
//     anchor are not covered by a signature ...");
//   NOT_FOUND, PERMISSION_DENIED, ... (following errno) when a file cannot
//     be read; INVALID_ARGUMENT when `paths` is empty, a path is a
//     directory, no file holds a record, or the certificate does not parse.
absl::StatusOr<AuditVerifyReport> VerifyAuditFiles(
    const std::vector<std::string>& paths, const AuditVerifyOptions& options);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_AUDIT_CHAIN_H_
