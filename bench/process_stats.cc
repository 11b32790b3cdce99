#include "bench/process_stats.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace fedgather::bench {

absl::StatusOr<double> CpuSeconds(pid_t pid) {
  const std::string path = absl::StrCat("/proc/", pid, "/stat");
  FG_ASSIGN_OR_RETURN(const std::string stat, ReadFileToString(path));
  // "PID (COMM) STATE ...": COMM may hold spaces and parentheses, so the
  // fields are counted from the last ')'. utime and stime are fields 14 and
  // 15; after the ')' they are the 12th and 13th.
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) {
    return absl::InternalError(absl::StrCat(path, ": no ')' in '", stat, "'"));
  }
  const std::vector<absl::string_view> fields = absl::StrSplit(
      absl::string_view(stat).substr(paren + 1), ' ', absl::SkipEmpty());
  uint64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::InternalError(
        absl::StrCat(path, ": no utime and stime in '", stat, "'"));
  }
  return static_cast<double>(utime + stime) /
         static_cast<double>(::sysconf(_SC_CLK_TCK));
}

absl::StatusOr<int64_t> PeakRssBytes(pid_t pid) {
  const std::string path = absl::StrCat("/proc/", pid, "/status");
  FG_ASSIGN_OR_RETURN(const std::string status, ReadFileToString(path));
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (!absl::ConsumePrefix(&line, "VmHWM:")) continue;
    line = absl::StripAsciiWhitespace(line);
    int64_t kib = 0;
    if (!absl::ConsumeSuffix(&line, " kB") ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) {
      break;
    }
    return kib * 1024;
  }
  return absl::InternalError(absl::StrCat(path, ": no VmHWM line"));
}

absl::Status ResetPeakRss(pid_t pid) {
  const std::string path = absl::StrCat("/proc/", pid, "/clear_refs");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, path);
  const bool written = ::write(fd, "5", 1) == 1;
  const int error = errno;
  ::close(fd);
  if (!written) return ErrnoToStatus(error, path);
  return absl::OkStatus();
}

}  // namespace fedgather::bench
