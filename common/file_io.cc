#include "common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace fedgather {

absl::Status ErrnoToStatus(int error_number, absl::string_view what) {
  const std::string message =
      absl::StrCat(what, ": ", std::strerror(error_number));
  switch (error_number) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EEXIST:
      return absl::AlreadyExistsError(message);
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
      return absl::ResourceExhaustedError(message);
    case EINVAL:
    case EISDIR:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status MakeDirectory(const std::string& path, int mode) {
  if (::mkdir(path.c_str(), mode) == 0) {
    if (::chmod(path.c_str(), mode) != 0) {
      return ErrnoToStatus(errno, absl::StrCat("chmod ", path));
    }
    return absl::OkStatus();
  }
  const int error = errno;
  struct stat st;
  if (error == EEXIST && ::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return absl::OkStatus();
    return ErrnoToStatus(ENOTDIR, absl::StrCat("mkdir ", path));
  }
  return ErrnoToStatus(error, absl::StrCat("mkdir ", path));
}

absl::Status MakeDirectories(const std::string& path, int mode) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    if (path[slash - 1] == '/') continue;  // "a//b"
    if (absl::Status made = MakeDirectory(path.substr(0, slash), mode);
        !made.ok()) {
      return made;
    }
  }
  return MakeDirectory(path, mode);
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int saved = errno;
    ::close(fd);
    return ErrnoToStatus(saved, absl::StrCat("stat ", path));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is a directory, not a file"));
  }
  std::string contents;
  contents.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (true) {
    if (done == contents.size()) contents.resize(contents.size() * 2 + 4096);
    const ssize_t n =
        ::read(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      ::close(fd);
      return ErrnoToStatus(saved, absl::StrCat("read ", path));
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  contents.resize(done);
  return contents;
}

absl::Status WritePiecesToFile(const std::string& path,
                               absl::Span<const absl::string_view> pieces,
                               int mode) {
  const std::string temp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd =
      ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("create ", temp));
  absl::Status status;
  if (::fchmod(fd, static_cast<mode_t>(mode)) != 0) {
    status = ErrnoToStatus(errno, absl::StrCat("chmod ", temp));
  }
  for (absl::string_view piece : pieces) {
    size_t done = 0;
    while (status.ok() && done < piece.size()) {
      const ssize_t n = ::write(fd, piece.data() + done, piece.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        status = ErrnoToStatus(errno, absl::StrCat("write ", temp));
        break;
      }
      done += static_cast<size_t>(n);
    }
  }
  if (::close(fd) != 0 && status.ok()) {
    status = ErrnoToStatus(errno, absl::StrCat("close ", temp));
  }
  if (status.ok() && ::rename(temp.c_str(), path.c_str()) != 0) {
    status = ErrnoToStatus(errno, absl::StrCat("rename to ", path));
  }
  if (!status.ok()) ::unlink(temp.c_str());
  return status;
}

absl::Status WriteStringToFile(const std::string& path,
                               absl::string_view contents, int mode) {
  return WritePiecesToFile(path, absl::MakeConstSpan(&contents, 1), mode);
}

}  // namespace fedgather
