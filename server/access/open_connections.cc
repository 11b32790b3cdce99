#include "server/access/open_connections.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include <vector>

#include "absl/strings/str_cat.h"

namespace fedgather::server {

absl::Status OpenConnections::Add(int fd, const std::string& address) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::InternalError(absl::StrCat("fstat of accepted socket fd ", fd,
                                            " from ", address, ": ",
                                            strerror(errno)));
  }
  absl::MutexLock lock(&mu_);
  if (auto old = by_fd_.find(fd); old != by_fd_.end()) Drop(old);
  by_fd_.emplace(fd, Entry{st.st_dev, st.st_ino, address});
  by_address_.emplace(address, fd);
  return absl::OkStatus();
}

int OpenConnections::CountFrom(const std::string& address) {
  absl::MutexLock lock(&mu_);
  std::vector<int> fds;
  auto [begin, end] = by_address_.equal_range(address);
  for (auto it = begin; it != end; ++it) fds.push_back(it->second);
  int open = 0;
  for (int fd : fds) {
    auto it = by_fd_.find(fd);
    if (StillOpen(fd, it->second)) {
      ++open;
    } else {
      Drop(it);
    }
  }
  return open;
}

int OpenConnections::Count() const {
  absl::MutexLock lock(&mu_);
  for (auto it = by_fd_.begin(); it != by_fd_.end();) {
    if (StillOpen(it->first, it->second)) {
      ++it;
    } else {
      Drop(it++);
    }
  }
  return static_cast<int>(by_fd_.size());
}

int OpenConnections::Tracked() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(by_fd_.size());
}

bool OpenConnections::StillOpen(int fd, const Entry& entry) {
  struct stat st;
  return ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
         st.st_dev == entry.device && st.st_ino == entry.inode;
}

void OpenConnections::Drop(std::map<int, Entry>::iterator it) const {
  auto [begin, end] = by_address_.equal_range(it->second.address);
  for (auto a = begin; a != end; ++a) {
    if (a->second == it->first) {
      by_address_.erase(a);
      break;
    }
  }
  by_fd_.erase(it);
}

}  // namespace fedgather::server
