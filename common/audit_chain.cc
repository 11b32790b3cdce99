#include "common/audit_chain.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/content_hasher.h"
#include "common/file_io.h"
#include "common/openssl_util.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace fedgather {
namespace {

// The keys of every record, in order; `sig` sits between details and prev
// on anchors only.
constexpr const char* kRecordKeys[] = {
    "seq",     "time",    "identity", "peer",
    "action",  "group",   "epoch",    "collective_seq",
    "rank",    "op",      "bytes",    "digest_algorithm",
    "digest",  "digests", "outcome",  "reason",
    "details", "prev"};
// The keys of a record written before digests named their algorithm
// (every digest in it is a SHA-256): "sha256" where "digest_algorithm" and
// "digest" are now.
constexpr const char* kSha256RecordKeys[] = {
    "seq",     "time",           "identity", "peer",    "action", "group",
    "epoch",   "collective_seq", "rank",     "op",      "bytes",  "sha256",
    "digests", "outcome",        "reason",   "details", "prev"};

// CheckRecordKeys: `json` has every key of one of the two schemas, and a
// digest_algorithm this build knows (null, "sha256" or "blake3").
absl::Status CheckRecordKeys(const nlohmann::json& json) {
  const bool legacy = json.contains("sha256");
  if (legacy &&
      (json.contains("digest") || json.contains("digest_algorithm"))) {
    return absl::DataLossError(
        "it has both the old \"sha256\" key and the \"digest\" keys");
  }
  auto check = [&](const auto& keys) {
    for (const char* key : keys) {
      if (!json.contains(key)) {
        return absl::DataLossError(absl::StrCat("it has no \"", key, "\" key"));
      }
    }
    return absl::OkStatus();
  };
  FG_RETURN_IF_ERROR(legacy ? check(kSha256RecordKeys) : check(kRecordKeys));
  if (legacy) return absl::OkStatus();
  const nlohmann::json& algorithm = json["digest_algorithm"];
  if (!algorithm.is_null() &&
      !(algorithm.is_string() &&
        ParseDigestAlgorithm(algorithm.get_ref<const std::string&>())
            .has_value())) {
    return absl::DataLossError(
        "its digest_algorithm is not null, \"sha256\" or \"blake3\"");
  }
  if (algorithm.is_null() &&
      !(json["digest"].is_null() && json["digests"].is_null())) {
    return absl::DataLossError(
        "it has digests but no digest_algorithm naming their hash");
  }
  return absl::OkStatus();
}

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* p) const { EVP_MD_CTX_free(p); }
};
using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, MdCtxDeleter>;

// Never prompt for a passphrase on the terminal: an encrypted key fails.
int NoPassphrase(char*, int, int, void*) { return -1; }

// EdDSA signs the message itself; every other key type signs its SHA-256.
const EVP_MD* DigestFor(const EVP_PKEY* key) {
  const int id = EVP_PKEY_get_base_id(key);
  if (id == EVP_PKEY_ED25519 || id == EVP_PKEY_ED448) return nullptr;
  return EVP_sha256();
}

bool IsLowerHex64(absl::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// What the verifier and the writer need from one record.
struct ParsedRecord {
  uint64_t seq = 0;
  std::string prev;
  bool is_anchor = false;
  std::string sig;  // anchors only
};

// ParseRecord checks a line against the record schema. The error (a plain
// reason, no record number) says what is wrong.
absl::StatusOr<ParsedRecord> ParseRecord(absl::string_view line) {
  const nlohmann::json json =
      nlohmann::json::parse(line.begin(), line.end(), nullptr,
                            /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::DataLossError("it does not parse as JSON");
  }
  if (!json.is_object()) {
    return absl::DataLossError("it is not a JSON object");
  }
  FG_RETURN_IF_ERROR(CheckRecordKeys(json));
  ParsedRecord record;
  const nlohmann::json& seq = json["seq"];
  if (!seq.is_number_unsigned()) {
    return absl::DataLossError("its seq is not an unsigned integer");
  }
  record.seq = seq.get<uint64_t>();
  const nlohmann::json& prev = json["prev"];
  if (!prev.is_string() || !IsLowerHex64(prev.get_ref<const std::string&>())) {
    return absl::DataLossError("its prev is not 64 lowercase hex digits");
  }
  record.prev = prev.get<std::string>();
  const nlohmann::json& action = json["action"];
  record.is_anchor = action.is_string() &&
                     action.get_ref<const std::string&>() == kAuditAnchorAction;
  if (record.is_anchor) {
    const auto sig = json.find("sig");
    if (sig == json.end() || !sig->is_string()) {
      return absl::DataLossError("it is an anchor without a sig string");
    }
    record.sig = sig->get<std::string>();
    if (record.seq == 0) {
      return absl::DataLossError(
          "it is an anchor with seq 0 (nothing to sign)");
    }
    const nlohmann::json& details = json["details"];
    const auto head = details.is_object() ? details.find("head_seq")
                                          : nlohmann::json::const_iterator();
    if (!details.is_object() || head == details.end() ||
        !head->is_number_unsigned() ||
        head->get<uint64_t>() != record.seq - 1) {
      return absl::DataLossError(absl::StrCat(
          "it is an anchor whose details.head_seq is not ", record.seq - 1));
    }
  } else if (json.contains("sig")) {
    return absl::DataLossError("it has a sig but is not an anchor");
  }
  return record;
}

// One line of the chain and where it came from.
struct Line {
  size_t file = 0;      // index into the paths
  uint64_t number = 0;  // 1-based line number in its file
  std::string text;     // without the '\n'
  bool has_newline = false;
};

// LineSource reads the lines of several files as one sequence, with one line
// of lookahead.
class LineSource {
 public:
  explicit LineSource(const std::vector<std::string>& paths) : paths_(paths) {}
  ~LineSource() {
    for (FILE* f : files_) {
      if (f != nullptr) std::fclose(f);
    }
    std::free(buffer_);
  }
  LineSource(const LineSource&) = delete;
  LineSource& operator=(const LineSource&) = delete;

  // Open opens every file up front, so a missing file fails before any
  // record is judged.
  absl::Status Open() {
    for (const std::string& path : paths_) {
      FILE* f = std::fopen(path.c_str(), "rbe");
      if (f == nullptr)
        return ErrnoToStatus(errno, absl::StrCat("open ", path));
      files_.push_back(f);
      struct stat st;
      if (::fstat(::fileno(f), &st) != 0) {
        return ErrnoToStatus(errno, absl::StrCat("stat ", path));
      }
      if (S_ISDIR(st.st_mode)) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, " is a directory, not an audit file"));
      }
    }
    return absl::OkStatus();
  }

  // Next moves the next line into *line; false after the last line.
  absl::StatusOr<bool> Next(Line* line) {
    if (lookahead_.has_value()) {
      *line = std::move(*lookahead_);
      lookahead_.reset();
      return true;
    }
    return Read(line);
  }

  // Peek returns the line Next would return, or null after the last line.
  absl::StatusOr<const Line*> Peek() {
    if (!lookahead_.has_value()) {
      Line line;
      FG_ASSIGN_OR_RETURN(const bool more, Read(&line));
      if (!more) return nullptr;
      lookahead_ = std::move(line);
    }
    return &*lookahead_;
  }

  const std::string& path(size_t file) const { return paths_[file]; }

 private:
  absl::StatusOr<bool> Read(Line* line) {
    while (current_ < files_.size()) {
      FILE* f = files_[current_];
      errno = 0;
      const ssize_t n = ::getline(&buffer_, &capacity_, f);
      if (n >= 0) {
        line->file = current_;
        line->number = ++line_number_;
        line->has_newline = n > 0 && buffer_[n - 1] == '\n';
        line->text.assign(buffer_, line->has_newline ? n - 1 : n);
        return true;
      }
      if (std::ferror(f)) {
        return ErrnoToStatus(errno, absl::StrCat("read ", paths_[current_]));
      }
      ++current_;
      line_number_ = 0;
    }
    return false;
  }

  const std::vector<std::string>& paths_;
  std::vector<FILE*> files_;
  size_t current_ = 0;
  uint64_t line_number_ = 0;
  char* buffer_ = nullptr;
  size_t capacity_ = 0;
  std::optional<Line> lookahead_;
};

// The previous record, as the next one is judged against it.
struct Previous {
  uint64_t seq = 0;
  std::string hash;
  std::string where;  // "file:line"
};

std::string Where(const LineSource& source, const Line& line) {
  return absl::StrCat(source.path(line.file), ":", line.number);
}

// Diagnose explains why `record` (at `line`, expected to have seq
// previous.seq + 1) does not follow `previous`. It may peek at the next line.
absl::Status Diagnose(LineSource* source, const Previous& previous,
                      const Line& line, const ParsedRecord& record) {
  const uint64_t expected = previous.seq + 1;
  const std::string where = Where(*source, line);
  if (record.prev == previous.hash) {
    // The record names its true predecessor, so its own seq was edited.
    return absl::DataLossError(absl::StrCat(
        "record ", expected, " (", where, ") was altered: it follows record ",
        previous.seq, " (", previous.where, ") but has seq ", record.seq));
  }
  FG_ASSIGN_OR_RETURN(const Line* next_line, source->Peek());
  absl::StatusOr<ParsedRecord> next = absl::NotFoundError("no next record");
  if (next_line != nullptr && next_line->has_newline) {
    next = ParseRecord(next_line->text);
  }
  if (record.seq == expected) {
    if (next.ok() && next->prev != AuditLineHash(line.text)) {
      // Its successor does not name it either: this line itself changed.
      return absl::DataLossError(absl::StrCat(
          "record ", expected, " (", where, ") was altered: its prev ",
          record.prev, " does not name record ", previous.seq, " (SHA-256 ",
          previous.hash, ") and record ", expected + 1,
          " does not name it either"));
    }
    return absl::DataLossError(absl::StrCat(
        "record ", previous.seq, " (", previous.where,
        ") was altered: its SHA-256 is ", previous.hash, " but record ",
        expected, " (", where, ") names ", record.prev));
  }
  if (record.seq > expected) {
    if (next.ok() && next->seq == expected) {
      return absl::DataLossError(
          absl::StrCat("record ", expected, " (", Where(*source, *next_line),
                       ") is out of order: it comes after record ", record.seq,
                       " (", where, "): records were reordered"));
    }
    const bool file_boundary = line.number == 1 && line.file > 0;
    const std::string why =
        file_boundary ? "records were deleted or a rotated file was left out"
                      : "records were deleted";
    if (record.seq == expected + 1) {
      return absl::DataLossError(
          absl::StrCat("record ", expected, " is missing (the next record, ",
                       where, ", has seq ", record.seq, "): ", why));
    }
    return absl::DataLossError(
        absl::StrCat("records ", expected, "..", record.seq - 1,
                     " are missing (the next record, ", where, ", has seq ",
                     record.seq, "): ", why));
  }
  if (record.seq == previous.seq) {
    return absl::DataLossError(absl::StrCat(
        "record ", record.seq, " (", where, ") is duplicated: ", previous.where,
        " also has seq ", record.seq, ": a record was inserted or repeated"));
  }
  return absl::DataLossError(
      absl::StrCat("record ", expected, " (", where, ") has seq ", record.seq,
                   ", going backwards: records were reordered or inserted"));
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// RecordsCutTail says whether `next` is the kAuditTailCutAction record for
// `cut`, a cut-off line of `cut_file` that followed `previous` (none: the
// files given start with the cut file).
bool RecordsCutTail(const Line& next, const Line& cut,
                    const std::string& cut_file,
                    const std::optional<Previous>& previous) {
  if (!next.has_newline) return false;
  const nlohmann::json json =
      nlohmann::json::parse(next.text, nullptr, /*allow_exceptions=*/false);
  absl::StatusOr<ParsedRecord> record = ParseRecord(next.text);
  if (!record.ok() || json.value("action", "") != kAuditTailCutAction) {
    return false;
  }
  const nlohmann::json& details = json["details"];
  if (!details.is_object() || details.value("file", "") != BaseName(cut_file) ||
      details.value("cut_bytes", "") != absl::StrCat(cut.text.size())) {
    return false;
  }
  if (!previous.has_value()) return true;  // its prev cannot be checked
  return record->seq == previous->seq + 1 && record->prev == previous->hash &&
         details.value("after_seq", "") == absl::StrCat(previous->seq);
}

}  // namespace

std::string AuditLineHash(absl::string_view line) {
  Sha256 hash;
  hash.Update(line.data(), line.size());
  return DigestToHex(hash.Finish());
}

std::string FormatAuditTime(absl::Time time) {
  return absl::FormatTime("%Y-%m-%d%ET%H:%M:%E6SZ", time, absl::UTCTimeZone());
}

std::string AuditAnchorMessage(uint64_t seq, absl::string_view prev_hex) {
  return absl::StrCat("fedgather-audit-anchor-v1 seq=", seq,
                      " prev=", prev_hex);
}

absl::StatusOr<std::string> SignAnchor(const std::string& key_pem, uint64_t seq,
                                       absl::string_view prev_hex) {
  OpenSslPtr<BIO> bio(
      BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  if (bio == nullptr) return OpenSslError("BIO_new_mem_buf");
  OpenSslPtr<EVP_PKEY> key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (key == nullptr) {
    return OpenSslError(
        "the audit signing key is not an unencrypted PEM "
        "private key",
        absl::StatusCode::kInvalidArgument);
  }
  const std::string message = AuditAnchorMessage(seq, prev_hex);
  MdCtxPtr ctx(EVP_MD_CTX_new());
  size_t size = 0;
  if (ctx == nullptr ||
      EVP_DigestSignInit(ctx.get(), nullptr, DigestFor(key.get()), nullptr,
                         key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &size,
                     reinterpret_cast<const unsigned char*>(message.data()),
                     message.size()) != 1) {
    return OpenSslError("signing an audit anchor");
  }
  std::string signature(size, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(&signature[0]),
                     &size,
                     reinterpret_cast<const unsigned char*>(message.data()),
                     message.size()) != 1) {
    return OpenSslError("signing an audit anchor");
  }
  signature.resize(size);
  return absl::Base64Escape(signature);
}

absl::Status VerifyAnchor(const std::string& cert_pem, uint64_t seq,
                          absl::string_view prev_hex,
                          absl::string_view sig_b64) {
  auto cert = ParseCertificatePem(cert_pem);
  if (!cert.ok()) return cert.status();
  EVP_PKEY* key = X509_get0_pubkey(cert->get());
  if (key == nullptr) {
    return OpenSslError("the certificate has no usable public key",
                        absl::StatusCode::kInvalidArgument);
  }
  std::string signature;
  if (!absl::Base64Unescape(sig_b64, &signature)) {
    return absl::DataLossError("the anchor signature is not base64");
  }
  const std::string message = AuditAnchorMessage(seq, prev_hex);
  MdCtxPtr ctx(EVP_MD_CTX_new());
  if (ctx == nullptr || EVP_DigestVerifyInit(ctx.get(), nullptr, DigestFor(key),
                                             nullptr, key) != 1) {
    return OpenSslError("verifying an audit anchor");
  }
  const int result = EVP_DigestVerify(
      ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()),
      signature.size(), reinterpret_cast<const unsigned char*>(message.data()),
      message.size());
  ERR_clear_error();
  if (result != 1) {
    return absl::DataLossError(
        "the anchor signature does not verify with the certificate's key");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<AuditChainHead>> ReadAuditChainHead(
    const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("stat ", path));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is a directory, not an audit file"));
  }
  const off_t size = st.st_size;
  if (size == 0) return std::nullopt;

  // Read backwards in chunks until the '\n' that ends the line before the
  // last one (or the start of the file).
  constexpr off_t kChunk = 64 << 10;
  std::string tail;  // the bytes from `start` to the end of the file
  off_t start = size;
  size_t line_start = std::string::npos;
  while (start > 0 && line_start == std::string::npos) {
    const off_t from = start > kChunk ? start - kChunk : 0;
    std::string chunk(static_cast<size_t>(start - from), '\0');
    size_t done = 0;
    while (done < chunk.size()) {
      const ssize_t n =
          ::pread(fd, &chunk[done], chunk.size() - done, from + done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoToStatus(errno, absl::StrCat("read ", path));
      if (n == 0) {
        return absl::FailedPreconditionError(
            absl::StrCat(path, " shrank while it was being read"));
      }
      done += static_cast<size_t>(n);
    }
    tail.insert(0, chunk);
    start = from;
    if (tail.back() != '\n') {
      return absl::FailedPreconditionError(
          absl::StrCat("the last record of ", path,
                       " is truncated (no terminating newline: a torn write)"));
    }
    const size_t newline = tail.size() >= 2 ? tail.rfind('\n', tail.size() - 2)
                                            : std::string::npos;
    if (newline != std::string::npos) {
      line_start = newline + 1;
    } else if (start == 0) {
      line_start = 0;
    }
  }
  const absl::string_view line =
      absl::string_view(tail).substr(line_start, tail.size() - 1 - line_start);
  absl::StatusOr<ParsedRecord> record = ParseRecord(line);
  if (!record.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the last record of ", path,
                     " is not a valid record: ", record.status().message()));
  }
  AuditChainHead head;
  head.seq = record->seq;
  head.hash = AuditLineHash(line);
  head.is_anchor = record->is_anchor;
  return head;
}

absl::StatusOr<AuditVerifyReport> VerifyAuditFiles(
    const std::vector<std::string>& paths, const AuditVerifyOptions& options) {
  if (paths.empty()) {
    return absl::InvalidArgumentError("no audit files to verify");
  }
  const bool check_signatures = !options.server_cert_pem.empty();
  if (check_signatures) {
    auto cert = ParseCertificatePem(options.server_cert_pem);
    if (!cert.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the server certificate does not parse: ", cert.status().message()));
    }
  }
  LineSource source(paths);
  FG_RETURN_IF_ERROR(source.Open());

  AuditVerifyReport report;
  std::optional<Previous> previous;
  bool last_is_anchor = false;
  std::optional<uint64_t> last_anchor;
  Line line;
  while (true) {
    FG_ASSIGN_OR_RETURN(const bool more, source.Next(&line));
    if (!more) break;
    const uint64_t expected = previous.has_value() ? previous->seq + 1 : 0;
    const std::string where = Where(source, line);
    if (!line.has_newline) {
      // A cut-off line ends its file. The server set it aside and recorded
      // the cut at the start of the next file; or the writer checks the
      // active file before it does.
      FG_ASSIGN_OR_RETURN(const Line* next, source.Peek());
      if (next != nullptr &&
          RecordsCutTail(*next, line, source.path(line.file), previous)) {
        report.cut_tails.push_back(absl::StrCat(
            source.path(line.file), ": ", line.text.size(),
            " bytes cut off after record ",
            previous.has_value() ? absl::StrCat(previous->seq) : "(none given)",
            ", recorded by the next record"));
        continue;
      }
      if (next == nullptr && options.allow_cut_tail) {
        report.cut_tail_bytes = line.text.size();
        break;
      }
      return absl::DataLossError(absl::StrCat(
          "record ", expected, " (", where,
          ") is truncated: its line has no terminating newline (a torn write "
          "or a cut file)"));
    }
    absl::StatusOr<ParsedRecord> record = ParseRecord(line.text);
    if (!record.ok()) {
      FG_ASSIGN_OR_RETURN(const Line* next, source.Peek());
      if (next == nullptr) {
        return absl::DataLossError(
            absl::StrCat("record ", expected, " (", where,
                         ") is truncated: ", record.status().message()));
      }
      return absl::DataLossError(absl::StrCat(
          "record ", expected, " (", where,
          ") was altered or corrupted: ", record.status().message()));
    }
    if (!previous.has_value()) {
      if (record->seq == 0 && record->prev != kAuditGenesisPrev) {
        return absl::DataLossError(absl::StrCat(
            "record 0 (", where, ") starts the chain but its prev is ",
            record->prev, ", not 64 zeros: it was altered"));
      }
      report.first_seq = record->seq;
    } else if (record->seq != expected || record->prev != previous->hash) {
      return Diagnose(&source, *previous, line, *record);
    }
    if (record->is_anchor) {
      if (check_signatures) {
        const absl::Status verified = VerifyAnchor(
            options.server_cert_pem, record->seq, record->prev, record->sig);
        if (!verified.ok()) {
          return absl::DataLossError(
              absl::StrCat("record ", record->seq, " (", where,
                           ") is an anchor whose signature does not verify: ",
                           verified.message()));
        }
      }
      ++report.anchors;
      last_anchor = record->seq;
    }
    last_is_anchor = record->is_anchor;
    ++report.records;
    report.last_seq = record->seq;
    previous = Previous{record->seq, AuditLineHash(line.text), where};
    report.last =
        AuditChainHead{record->seq, previous->hash, record->is_anchor};
  }
  if (report.records == 0 && report.cut_tail_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("no audit records in ", absl::StrJoin(paths, ", ")));
  }
  if (check_signatures && !last_is_anchor && !options.allow_unsigned_tail) {
    const uint64_t first =
        last_anchor.has_value() ? *last_anchor + 1 : report.first_seq;
    return absl::DataLossError(absl::StrCat(
        "records ", first, "..", report.last_seq,
        last_anchor.has_value() ? " after the last signed anchor"
                                : " (there is no signed anchor)",
        " are not covered by a signature (the tail may have been rewritten "
        "or truncated)"));
  }
  report.signed_to_end = check_signatures && last_is_anchor;
  return report;
}

}  // namespace fedgather
