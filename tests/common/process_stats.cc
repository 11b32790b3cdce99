#include "tests/common/process_stats.h"

#include <dirent.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/file_io.h"

namespace fedgather::testing {
namespace {

// The number in a /proc/<pid>/status value such as "  123456 kB".
bool ParseStatusNumber(absl::string_view value, int64_t* out) {
  value = absl::StripAsciiWhitespace(value);
  absl::ConsumeSuffix(&value, " kB");
  return absl::SimpleAtoi(value, out);
}

}  // namespace

std::string ProcessStats::ToString() const {
  return absl::StrCat("RSS ", rss_kib / 1024.0, " MiB (peak ",
                      peak_rss_kib / 1024.0, " MiB), ", fds, " fds, ", threads,
                      " threads");
}

absl::StatusOr<ProcessStats> ReadProcessStats(pid_t pid) {
  const std::string dir = absl::StrCat("/proc/", pid);
  absl::StatusOr<std::string> status = ReadFileToString(dir + "/status");
  if (!status.ok()) {
    return absl::NotFoundError(
        absl::StrCat("process ", pid, " is gone: ", status.status().message()));
  }
  ProcessStats stats;
  int found = 0;
  for (absl::string_view line : absl::StrSplit(*status, '\n')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(':', 1));
    int64_t value = 0;
    if (kv.first == "VmRSS" && ParseStatusNumber(kv.second, &value)) {
      stats.rss_kib = value;
      ++found;
    } else if (kv.first == "VmHWM" && ParseStatusNumber(kv.second, &value)) {
      stats.peak_rss_kib = value;
      ++found;
    } else if (kv.first == "Threads" && ParseStatusNumber(kv.second, &value)) {
      stats.threads = static_cast<int>(value);
      ++found;
    }
  }
  if (found != 3) {
    return absl::InternalError(
        absl::StrCat(dir, "/status lacks VmRSS, VmHWM or Threads"));
  }
  DIR* fds = ::opendir((dir + "/fd").c_str());
  if (fds == nullptr) {
    return absl::InternalError(absl::StrCat("cannot list ", dir, "/fd"));
  }
  while (const dirent* entry = ::readdir(fds)) {
    if (entry->d_name[0] != '.') ++stats.fds;
  }
  ::closedir(fds);
  return stats;
}

absl::StatusOr<ProcessStats> ReadSettledProcessStats(pid_t pid,
                                                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<ProcessStats> last = ReadProcessStats(pid);
  int same = 1;
  while (last.ok() && same < 3 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    absl::StatusOr<ProcessStats> next = ReadProcessStats(pid);
    if (!next.ok()) return next;
    same = next->fds == last->fds ? same + 1 : 1;
    last = next;
  }
  return last;
}

int FdsAfter(pid_t pid, int most, absl::Duration bound) {
  const absl::Time deadline = absl::Now() + bound;
  int fds = -1;
  do {
    absl::StatusOr<ProcessStats> stats = ReadProcessStats(pid);
    if (!stats.ok()) return -1;
    fds = stats->fds;
    if (fds <= most) return fds;
    absl::SleepFor(absl::Milliseconds(50));
  } while (absl::Now() < deadline);
  return fds;
}

}  // namespace fedgather::testing
