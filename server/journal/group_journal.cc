#include "server/journal/group_journal.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/file_io.h"

namespace fedgather::server {
namespace {

enum class GroupRecord : uint8_t {
  kFormed = 1,
  kStarted = 2,
  kFinished = 3,
  kEnded = 4,
  kFormedWithDigest = 5,
};

constexpr char kRoundPrefix[] = "round-";
constexpr char kRoundSuffix[] = ".journal";

// ListDirectory names the entries of `path` but "." and ".." (none when it
// cannot be read).
std::vector<std::string> ListDirectory(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return names;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(dir);
  return names;
}

}  // namespace

std::string EscapeGroupName(const std::string& group) {
  std::string escaped;
  for (const char c : group) {
    if (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
        c == '_') {
      escaped.push_back(c);
    } else {
      absl::StrAppendFormat(&escaped, "%%%02X", static_cast<uint8_t>(c));
    }
  }
  return escaped;
}

absl::StatusOr<std::unique_ptr<GroupJournal>> GroupJournal::Open(
    const std::string& state_dir, const std::string& group) {
  const std::string groups = absl::StrCat(state_dir, "/groups");
  for (const std::string& dir :
       {groups, absl::StrCat(groups, "/", EscapeGroupName(group))}) {
    if (absl::Status made = MakeDirectory(dir, 0700); !made.ok()) {
      return made;
    }
  }
  return std::unique_ptr<GroupJournal>(
      new GroupJournal(absl::StrCat(groups, "/", EscapeGroupName(group))));
}

std::string GroupJournal::EpochPath() const {
  return absl::StrCat(directory_, "/epoch.journal");
}

std::string GroupJournal::RoundPath(uint64_t seq) const {
  return absl::StrCat(directory_, "/", kRoundPrefix, seq, kRoundSuffix);
}

absl::StatusOr<GroupJournal::Saved> GroupJournal::Load() {
  Saved saved;
  const std::string path = EpochPath();
  if (access(path.c_str(), F_OK) != 0) return saved;
  auto bad = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat("journal ", path, ": ", what));
  };
  absl::StatusOr<int64_t> valid =
      ReadJournal(path, [&](JournalRecord record) -> absl::Status {
        switch (static_cast<GroupRecord>(record.kind)) {
          case GroupRecord::kFormed:
          case GroupRecord::kFormedWithDigest: {
            std::vector<std::string> lines =
                absl::StrSplit(record.payload, '\n');
            saved = Saved();
            const size_t first_member =
                record.kind ==
                        static_cast<uint8_t>(GroupRecord::kFormedWithDigest)
                    ? 2
                    : 1;
            if (lines.size() < first_member + 1 ||
                !absl::SimpleAtoi(lines[0], &saved.epoch)) {
              return bad("a formed record without an epoch and members");
            }
            if (first_member == 2) {
              std::optional<DigestAlgorithm> digest =
                  ParseDigestAlgorithm(lines[1]);
              if (!digest.has_value()) {
                return bad(absl::StrCat("a formed record names digest '",
                                        absl::CEscape(lines[1]),
                                        "' (expected blake3 or sha256)"));
              }
              saved.digest = *digest;
            }
            for (size_t i = first_member; i < lines.size(); ++i) {
              std::string identity;
              if (!absl::CUnescape(lines[i], &identity)) {
                return bad("a formed record with a malformed identity");
              }
              saved.identities.push_back(std::move(identity));
            }
            saved.formed = true;
            saved.next_seq.assign(saved.identities.size(), 0);
            return absl::OkStatus();
          }
          case GroupRecord::kStarted: {
            uint64_t seq = 0;
            if (record.rank >= saved.next_seq.size() ||
                !absl::SimpleAtoi(record.payload, &seq)) {
              return bad("a malformed started record");
            }
            saved.next_seq[record.rank] =
                std::max(saved.next_seq[record.rank], seq + 1);
            return absl::OkStatus();
          }
          case GroupRecord::kFinished: {
            std::vector<std::string> parts =
                absl::StrSplit(record.payload, absl::MaxSplits('\n', 2));
            uint64_t seq = 0;
            int code = 0;
            if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &seq) ||
                !absl::SimpleAtoi(parts[1], &code)) {
              return bad("a malformed finished record");
            }
            saved.outcomes[seq] =
                absl::Status(static_cast<absl::StatusCode>(code), parts[2]);
            return absl::OkStatus();
          }
          case GroupRecord::kEnded: {
            Saved ended;
            if (!absl::SimpleAtoi(record.payload, &ended.epoch)) {
              return bad("a malformed ended record");
            }
            saved = std::move(ended);
            return absl::OkStatus();
          }
        }
        return bad(absl::StrCat("unknown record kind ", record.kind));
      });
  if (!valid.ok()) return valid.status();
  absl::StatusOr<std::unique_ptr<JournalFile>> epochs =
      JournalFile::OpenForAppend(path, *valid);
  if (!epochs.ok()) return epochs.status();
  epochs_ = *std::move(epochs);
  if (!saved.formed) {
    DiscardRounds();
    return saved;
  }
  for (const std::string& file : ListDirectory(directory_)) {
    absl::string_view name = file;
    uint64_t seq = 0;
    if (absl::ConsumePrefix(&name, kRoundPrefix) &&
        absl::ConsumeSuffix(&name, kRoundSuffix) &&
        absl::SimpleAtoi(name, &seq)) {
      saved.rounds[seq] = RoundPath(seq);
    }
  }
  return saved;
}

absl::Status GroupJournal::StartFile(uint8_t kind, const std::string& payload) {
  epochs_.reset();
  absl::StatusOr<std::unique_ptr<JournalFile>> file =
      JournalFile::Create(EpochPath());
  if (!file.ok()) return file.status();
  epochs_ = *std::move(file);
  if (absl::Status s = epochs_->Append(kind, 0, payload); !s.ok()) return s;
  if (absl::Status s = epochs_->Sync(); !s.ok()) return s;
  return SyncDirectory(directory_);
}

absl::Status GroupJournal::Formed(uint64_t epoch, DigestAlgorithm digest,
                                  const std::vector<std::string>& identities) {
  DiscardRounds();
  std::string payload = absl::StrCat(epoch, "\n", DigestAlgorithmName(digest));
  for (const std::string& identity : identities) {
    absl::StrAppend(&payload, "\n", absl::CEscape(identity));
  }
  return StartFile(static_cast<uint8_t>(GroupRecord::kFormedWithDigest),
                   payload);
}

absl::Status GroupJournal::Started(int rank, uint64_t seq) {
  if (epochs_ == nullptr) {
    return absl::FailedPreconditionError("no epoch is journaled");
  }
  return epochs_->Append(static_cast<uint8_t>(GroupRecord::kStarted),
                         static_cast<uint32_t>(rank), absl::StrCat(seq));
}

absl::Status GroupJournal::Finished(uint64_t seq, const absl::Status& outcome) {
  if (epochs_ == nullptr) {
    return absl::FailedPreconditionError("no epoch is journaled");
  }
  return epochs_->Append(
      static_cast<uint8_t>(GroupRecord::kFinished), 0,
      absl::StrCat(seq, "\n", static_cast<int>(outcome.code()), "\n",
                   outcome.message()));
}

absl::Status GroupJournal::Ended(uint64_t epoch) {
  DiscardRounds();
  return StartFile(static_cast<uint8_t>(GroupRecord::kEnded),
                   absl::StrCat(epoch));
}

absl::StatusOr<std::unique_ptr<JournalFile>> GroupJournal::CreateRoundJournal(
    uint64_t seq) const {
  return JournalFile::Create(RoundPath(seq));
}

void GroupJournal::DiscardRound(uint64_t seq) const {
  unlink(RoundPath(seq).c_str());
}

void GroupJournal::DiscardRounds() const {
  for (const std::string& name : ListDirectory(directory_)) {
    if (absl::StartsWith(name, kRoundPrefix) &&
        absl::EndsWith(name, kRoundSuffix)) {
      unlink(absl::StrCat(directory_, "/", name).c_str());
    }
  }
}

void DropGroupStatesExcept(const std::string& state_dir,
                           const std::set<std::string>& groups) {
  std::set<std::string> kept;
  for (const std::string& group : groups) kept.insert(EscapeGroupName(group));
  const std::string root = absl::StrCat(state_dir, "/groups");
  for (const std::string& name : ListDirectory(root)) {
    if (kept.count(name) > 0) continue;
    const std::string directory = absl::StrCat(root, "/", name);
    for (const std::string& file : ListDirectory(directory)) {
      unlink(absl::StrCat(directory, "/", file).c_str());
    }
    rmdir(directory.c_str());
  }
}

}  // namespace fedgather::server
