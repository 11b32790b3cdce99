#include "server/observe/audit_log.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/audit_chain.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace fedgather::server {
namespace {

using Json = nlohmann::ordered_json;

template <typename T>
Json OrNull(const std::optional<T>& value) {
  return value.has_value() ? Json(*value) : Json(nullptr);
}

// Dump renders one record on one line. Invalid UTF-8 (e.g. in a peer's
// certificate name) is replaced rather than thrown.
std::string Dump(const Json& json) {
  return json.dump(-1, ' ', /*ensure_ascii=*/false,
                   Json::error_handler_t::replace);
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string BaseNameOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string RotatedPath(const std::string& path, uint64_t index) {
  return absl::StrFormat("%s.%06d", path, index);
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open directory ", dir));
  absl::Status status;
  if (::fsync(fd) != 0) {
    status = ErrnoToStatus(errno, absl::StrCat("fsync directory ", dir));
  }
  ::close(fd);
  return status;
}

// NewestRotation returns the highest N of the existing `<path>.N` files
// (N all digits, at least 6 of them), or 0 when there are none.
absl::StatusOr<uint64_t> NewestRotation(const std::string& path) {
  const std::string dir = DirectoryOf(path);
  const std::string prefix = BaseNameOf(path) + ".";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoToStatus(errno, absl::StrCat("open ", dir));
  uint64_t newest = 0;
  while (const dirent* entry = ::readdir(d)) {
    const absl::string_view name = entry->d_name;
    if (!absl::StartsWith(name, prefix)) continue;
    const absl::string_view suffix = name.substr(prefix.size());
    if (suffix.size() < 6) continue;
    bool digits = true;
    for (char c : suffix) digits = digits && absl::ascii_isdigit(c);
    uint64_t index = 0;
    if (digits && absl::SimpleAtoi(suffix, &index) && index > newest) {
      newest = index;
    }
  }
  ::closedir(d);
  return newest;
}

// ReadHead is ReadAuditChainHead with the operator's advice added to a
// refusal. nullopt for a missing or empty file.
absl::StatusOr<std::optional<AuditChainHead>> ReadHead(
    const std::string& path) {
  absl::StatusOr<std::optional<AuditChainHead>> head = ReadAuditChainHead(path);
  if (absl::IsNotFound(head.status())) return std::nullopt;
  if (absl::IsFailedPrecondition(head.status())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot continue the audit chain: ", head.status().message(),
        "; run `fedgather audit verify` on ", path,
        " (and the rotated files before it) and move it aside"));
  }
  return head;
}

// A cut-off active file, set aside: the last intact record (none when the
// file held no whole record) and the record that reports the cut.
struct SetAside {
  std::optional<AuditChainHead> head;
  AuditRecord cut;
};

// SetAsideCutFile verifies the active file `path`, whose head could not be
// read (`unreadable` says why), up to its cut-off last line, and renames it
// to `rotated`. FAILED_PRECONDITION, naming the file and the operator's
// advice, when more than its last line is damaged.
absl::StatusOr<SetAside> SetAsideCutFile(const std::string& path,
                                         const absl::Status& unreadable,
                                         const std::string& rotated) {
  AuditVerifyOptions options;
  options.allow_cut_tail = true;
  const absl::StatusOr<AuditVerifyReport> report =
      VerifyAuditFiles({path}, options);
  if (!report.ok() || report->cut_tail_bytes == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot continue the audit chain: ", unreadable.message(),
        report.ok() ? ""
                    : absl::StrCat("; and before its last line: ",
                                   report.status().message()),
        "; only a cut-off last line is repaired at start; run `fedgather "
        "audit verify` on ",
        path, " (and the rotated files before it) and move it aside"));
  }
  if (::rename(path.c_str(), rotated.c_str()) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("rename cut-off audit file ", path,
                                             " to ", rotated));
  }
  SetAside aside;
  if (report->records > 0) aside.head = report->last;
  aside.cut.action = std::string(kAuditTailCutAction);
  aside.cut.outcome = absl::StatusCodeToString(absl::StatusCode::kDataLoss);
  const std::string after =
      aside.head.has_value() ? absl::StrCat(aside.head->seq) : "";
  aside.cut.reason = absl::StrCat(
      "the last ", report->cut_tail_bytes, " bytes of ", path,
      " were cut off (a torn write) and are kept unread in ", rotated,
      aside.head.has_value()
          ? absl::StrCat("; the chain continues after record ", after)
          : "");
  aside.cut.details = {{"file", BaseNameOf(rotated)},
                       {"cut_bytes", absl::StrCat(report->cut_tail_bytes)}};
  if (aside.head.has_value())
    aside.cut.details.emplace_back("after_seq", after);
  return aside;
}

}  // namespace

AuditLog::AuditLog(AuditLogOptions options) : options_(std::move(options)) {}

AuditLog::~AuditLog() { Close().IgnoreError(); }

absl::StatusOr<std::unique_ptr<AuditLog>> AuditLog::Open(
    AuditLogOptions options) {
  if (options.path.empty()) {
    return absl::InvalidArgumentError("the audit log needs a path");
  }
  if (options.anchor_every < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "audit anchor_every must be >= 1, not ", options.anchor_every));
  }
  if (options.rotate_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "audit rotate_bytes must be >= 0, not ", options.rotate_bytes));
  }
  if (options.retry_period <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("audit retry_period must be positive, not ",
                     absl::FormatDuration(options.retry_period)));
  }
  if (options.max_queued_records < 1) {
    return absl::InvalidArgumentError("audit max_queued_records must be >= 1");
  }
  if (!options.clock) options.clock = SystemClock();
  if (!options.file.write) options.file.write = ::write;
  if (!options.file.fsync) options.file.fsync = ::fsync;
  if (!options.signing_key_pem.empty()) {
    absl::StatusOr<std::string> probe =
        SignAnchor(options.signing_key_pem, 0, kAuditGenesisPrev);
    if (!probe.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the audit signing key cannot sign: ", probe.status().message()));
    }
  }
  std::unique_ptr<AuditLog> log(new AuditLog(std::move(options)));
  const std::string& path = log->options_.path;
  // A missing directory is created, private to the server's user.
  if (const size_t slash = path.rfind('/');
      slash != std::string::npos && slash > 0) {
    FG_RETURN_IF_ERROR(MakeDirectories(path.substr(0, slash), 0700));
  }

  FG_ASSIGN_OR_RETURN(const uint64_t newest, NewestRotation(path));
  log->next_rotation_ = newest + 1;
  absl::StatusOr<std::optional<AuditChainHead>> read = ReadAuditChainHead(path);
  if (absl::IsNotFound(read.status())) read = std::nullopt;
  if (absl::IsFailedPrecondition(read.status())) {
    FG_ASSIGN_OR_RETURN(
        SetAside aside,
        SetAsideCutFile(path, read.status(),
                        RotatedPath(path, log->next_rotation_++)));
    read = aside.head;
    aside.cut.time = log->options_.clock->Now();
    log->pending_.push_back(std::move(aside.cut));
    absl::MutexLock lock(&log->mu_);
    ++log->appended_;
  }
  FG_ASSIGN_OR_RETURN(std::optional<AuditChainHead> head, std::move(read));
  if (!head.has_value() && newest > 0) {
    FG_ASSIGN_OR_RETURN(head, ReadHead(RotatedPath(path, newest)));
  }
  if (head.has_value()) {
    log->next_seq_ = head->seq + 1;
    log->prev_hash_ = head->hash;
    log->last_is_anchor_ = head->is_anchor;
  } else {
    log->prev_hash_ = std::string(kAuditGenesisPrev);
  }

  log->fd_ =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log->fd_ < 0) {
    return ErrnoToStatus(errno, absl::StrCat("open audit file ", path));
  }
  struct stat st;
  if (::fchmod(log->fd_, 0600) != 0 || ::fstat(log->fd_, &st) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("chmod/stat audit file ", path));
  }
  log->file_size_ = st.st_size;
  FG_RETURN_IF_ERROR(SyncDirectory(DirectoryOf(path)));
  log->writer_ = std::thread([raw = log.get()] { raw->WriterLoop(); });
  return log;
}

void AuditLog::Append(AuditRecord record) {
  absl::MutexLock lock(&mu_);
  ++appended_;
  record.time = options_.clock->Now();
  if (stopping_) {
    ++processed_;
    ++dropped_;
    return;
  }
  if (queue_.size() >= options_.max_queued_records) {
    DropLocked(record.time);
    return;
  }
  queue_.push_back(std::move(record));
}

void AuditLog::DropLocked(absl::Time appended) {
  ++processed_;
  ++dropped_;
  if (gap_.dropped++ == 0) gap_.first_dropped = appended;
  gap_.last_dropped = appended;
}

absl::Status AuditLog::Flush() {
  absl::MutexLock lock(&mu_);
  struct Target {
    AuditLog* log;
    uint64_t count;
  } target{this, appended_};
  mu_.Await(absl::Condition(
      +[](Target* t) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return t->log->processed_ >= t->count || !t->log->status_.ok();
      },
      &target));
  return status_;
}

bool AuditLog::WaitUntilWritten(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  struct Target {
    AuditLog* log;
    uint64_t count;
  } target{this, appended_};
  return mu_.AwaitWithTimeout(
      absl::Condition(
          +[](Target* t) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return t->log->processed_ >= t->count && t->log->status_.ok();
          },
          &target),
      timeout);
}

absl::Status AuditLog::Close() {
  absl::MutexLock close_lock(&close_mu_);
  if (closed_) return close_status_;
  closed_ = true;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (writer_.joinable()) writer_.join();
  // The writer has stopped: the file is ours. A last try: the first pass
  // may only recover from a failure (and queue its "audit_gap" record).
  WriteAndReport();
  WriteAndReport();
  absl::Status closed = status();
  if (closed.ok() && fd_ >= 0 && !options_.signing_key_pem.empty() &&
      next_seq_ > 0 && !last_is_anchor_) {
    closed = WriteAnchor();
  }
  if (closed.ok() && fd_ >= 0) closed = SyncFile();
  if (fd_ >= 0 && ::close(fd_) != 0 && closed.ok()) {
    closed =
        ErrnoToStatus(errno, absl::StrCat("close audit file ", options_.path));
  }
  fd_ = -1;
  absl::MutexLock lock(&mu_);
  const uint64_t unwritten = pending_.size() + queue_.size();
  processed_ += unwritten;
  dropped_ += unwritten;
  pending_.clear();
  queue_.clear();
  if (!closed.ok() && status_.ok()) status_ = closed;
  close_status_ = status_;
  return close_status_;
}

absl::Status AuditLog::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

uint64_t AuditLog::records_written() const {
  absl::MutexLock lock(&mu_);
  return written_;
}

uint64_t AuditLog::anchors_written() const {
  absl::MutexLock lock(&mu_);
  return anchors_;
}

uint64_t AuditLog::records_dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

uint64_t AuditLog::write_failures() const {
  absl::MutexLock lock(&mu_);
  return failures_;
}

void AuditLog::WriterLoop() {
  if (!pending_.empty()) WriteAndReport();  // Open's audit_tail_cut record
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (status_.ok()) {
        mu_.Await(absl::Condition(
            +[](AuditLog* log) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return !log->queue_.empty() || log->gap_.dropped > 0 ||
                     log->gap_.failed_since.has_value() || log->stopping_;
            },
            this));
      } else {
        mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                             options_.retry_period);
      }
      if (stopping_) return;  // Close writes what is left
    }
    WriteAndReport();
  }
}

void AuditLog::TakeQueuedLocked() {
  const bool gap = gap_.failed_since.has_value() || gap_.dropped > 0;
  if (!status_.ok() || (queue_.empty() && !gap)) return;
  for (AuditRecord& record : queue_) pending_.push_back(std::move(record));
  queue_.clear();
  if (!gap) return;
  AuditRecord record;
  record.action = "audit_gap";
  record.time = options_.clock->Now();
  if (gap_.failed_since.has_value()) {
    record.outcome = absl::StatusCodeToString(gap_.error.code());
    record.reason = std::string(gap_.error.message());
    record.details.emplace_back("unwritable_from",
                                FormatAuditTime(*gap_.failed_since));
    record.details.emplace_back("unwritable_until",
                                FormatAuditTime(*gap_.failed_until));
  }
  record.details.emplace_back("dropped", absl::StrCat(gap_.dropped));
  if (gap_.dropped > 0) {
    record.details.emplace_back("first_dropped",
                                FormatAuditTime(gap_.first_dropped));
    record.details.emplace_back("last_dropped",
                                FormatAuditTime(gap_.last_dropped));
  }
  pending_.push_back(std::move(record));
  ++appended_;  // the gap record is processed like an appended one
  gap_ = Gap();
}

void AuditLog::WriteAndReport() {
  {
    absl::MutexLock lock(&mu_);
    TakeQueuedLocked();
  }
  const absl::Status written = WritePending();
  const absl::Time now = options_.clock->Now();
  absl::MutexLock lock(&mu_);
  written_ += unreported_writes_;
  processed_ += unreported_writes_;
  unreported_writes_ = 0;
  if (!written.ok()) {
    if (status_.ok()) {
      ++failures_;
      gap_.failed_since = now;
    }
    status_ = written;
    gap_.error = written;
  } else if (!status_.ok()) {
    status_ = absl::OkStatus();
    gap_.failed_until = now;
  }
}

absl::Status AuditLog::WritePending() {
  FG_RETURN_IF_ERROR(CutTornLine());
  FG_RETURN_IF_ERROR(AnchorAndRotateIfDue());
  while (!pending_.empty()) {
    FG_RETURN_IF_ERROR(WriteRecord(pending_.front()));
    pending_.pop_front();
    ++unreported_writes_;
    if (options_.fsync == AuditFsync::kEveryRecord) {
      FG_RETURN_IF_ERROR(SyncFile());
    }
    FG_RETURN_IF_ERROR(AnchorAndRotateIfDue());
  }
  if (unsynced_ && options_.fsync != AuditFsync::kOff) {
    FG_RETURN_IF_ERROR(SyncFile());
  }
  return absl::OkStatus();
}

absl::Status AuditLog::CutTornLine() {
  if (!torn_) return absl::OkStatus();
  if (::ftruncate(fd_, file_size_) != 0) {
    return ErrnoToStatus(
        errno, absl::StrCat("cut a partly written line off audit file ",
                            options_.path));
  }
  torn_ = false;
  return absl::OkStatus();
}

absl::Status AuditLog::AnchorAndRotateIfDue() {
  const bool signing = !options_.signing_key_pem.empty();
  if (signing && since_anchor_ >= options_.anchor_every) {
    FG_RETURN_IF_ERROR(WriteAnchor());
  }
  if (options_.rotate_bytes > 0 && file_size_ >= options_.rotate_bytes) {
    // Each closed file ends signed.
    if (signing && !last_is_anchor_) FG_RETURN_IF_ERROR(WriteAnchor());
    FG_RETURN_IF_ERROR(Rotate());
  }
  return absl::OkStatus();
}

absl::Status AuditLog::WriteRecord(const AuditRecord& record) {
  Json digests(nullptr);
  if (!record.digests.empty()) {
    digests = Json::array();
    for (const ContributionDigest& d : record.digests) {
      Json entry;
      entry["rank"] = d.rank;
      entry["identity"] = d.identity;
      entry["digest"] = d.digest_hex;
      entry["bytes"] = d.bytes;
      digests.push_back(std::move(entry));
    }
  }
  Json details(nullptr);
  if (!record.details.empty()) {
    details = Json::object();
    for (const auto& [key, value] : record.details) details[key] = value;
  }
  Json json;
  json["seq"] = next_seq_;
  json["time"] = FormatAuditTime(record.time);
  json["identity"] = OrNull(record.identity);
  json["peer"] = OrNull(record.peer);
  // "anchor" is the log's own action; a caller's record never poses as one.
  json["action"] = record.action == kAuditAnchorAction
                       ? absl::StrCat("reserved:", record.action)
                       : record.action;
  json["group"] = OrNull(record.group);
  json["epoch"] = OrNull(record.epoch);
  json["collective_seq"] = OrNull(record.collective_seq);
  json["rank"] = OrNull(record.rank);
  json["op"] = OrNull(record.op);
  json["bytes"] = OrNull(record.bytes);
  json["digest_algorithm"] = OrNull(record.digest_algorithm);
  json["digest"] = OrNull(record.digest_hex);
  json["digests"] = std::move(digests);
  json["outcome"] = record.outcome;
  json["reason"] = OrNull(record.reason);
  json["details"] = std::move(details);
  json["prev"] = prev_hash_;
  return WriteLine(Dump(json), /*is_anchor=*/false);
}

absl::Status AuditLog::WriteAnchor() {
  if (next_seq_ == 0) return absl::OkStatus();  // nothing to sign
  FG_ASSIGN_OR_RETURN(std::string sig, SignAnchor(options_.signing_key_pem,
                                                  next_seq_, prev_hash_));
  Json json;
  json["seq"] = next_seq_;
  json["time"] = FormatAuditTime(options_.clock->Now());
  json["identity"] = nullptr;
  json["peer"] = nullptr;
  json["action"] = kAuditAnchorAction;
  json["group"] = nullptr;
  json["epoch"] = nullptr;
  json["collective_seq"] = nullptr;
  json["rank"] = nullptr;
  json["op"] = nullptr;
  json["bytes"] = nullptr;
  json["digest_algorithm"] = nullptr;
  json["digest"] = nullptr;
  json["digests"] = nullptr;
  json["outcome"] = "OK";
  json["reason"] = nullptr;
  json["details"] = Json{{"head_seq", next_seq_ - 1}};
  json["sig"] = std::move(sig);
  json["prev"] = prev_hash_;
  FG_RETURN_IF_ERROR(WriteLine(Dump(json), /*is_anchor=*/true));
  absl::MutexLock lock(&mu_);
  ++anchors_;
  return absl::OkStatus();
}

absl::Status AuditLog::WriteLine(std::string line, bool is_anchor) {
  std::string hash = AuditLineHash(line);
  line.push_back('\n');
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n =
        options_.file.write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      torn_ = done > 0;
      return ErrnoToStatus(errno,
                           absl::StrCat("write audit file ", options_.path));
    }
    done += static_cast<size_t>(n);
  }
  file_size_ += static_cast<int64_t>(line.size());
  unsynced_ = true;
  prev_hash_ = std::move(hash);
  ++next_seq_;
  last_is_anchor_ = is_anchor;
  since_anchor_ = is_anchor ? 0 : since_anchor_ + 1;
  return absl::OkStatus();
}

absl::Status AuditLog::SyncFile() {
  if (options_.file.fsync(fd_) != 0) {
    return ErrnoToStatus(errno,
                         absl::StrCat("fsync audit file ", options_.path));
  }
  unsynced_ = false;
  return absl::OkStatus();
}

// Rotate is safe to try again after any step failed: the file is closed
// once, renamed only while it exists, and the new one opened last.
absl::Status AuditLog::Rotate() {
  const std::string& path = options_.path;
  if (fd_ >= 0) {
    FG_RETURN_IF_ERROR(SyncFile());
    const int old_fd = fd_;
    fd_ = -1;
    if (::close(old_fd) != 0) {
      return ErrnoToStatus(errno, absl::StrCat("close audit file ", path));
    }
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    std::string target = RotatedPath(path, next_rotation_);
    while (::lstat(target.c_str(), &st) == 0) {
      target = RotatedPath(path, ++next_rotation_);
    }
    if (::rename(path.c_str(), target.c_str()) != 0) {
      return ErrnoToStatus(
          errno, absl::StrCat("rename audit file ", path, " to ", target));
    }
    ++next_rotation_;
  }
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC,
               0600);
  if (fd_ < 0) {
    return ErrnoToStatus(errno, absl::StrCat("create audit file ", path));
  }
  file_size_ = 0;
  return SyncDirectory(DirectoryOf(path));
}

}  // namespace fedgather::server
