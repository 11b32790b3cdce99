#include "client/server_liveness.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace fedgather {

ServerLiveness::ServerLiveness(std::string server, std::string group)
    : server_(std::move(server)), group_(std::move(group)) {}

void ServerLiveness::Watch(absl::Duration timeout, absl::Duration check_every,
                           absl::Time now) {
  absl::MutexLock lock(&mu_);
  watching_ = timeout > absl::ZeroDuration();
  timeout_ = timeout;
  check_every_ = check_every;
  last_heard_ = now;
}

void ServerLiveness::Pause() {
  absl::MutexLock lock(&mu_);
  watching_ = false;
}

void ServerLiveness::Heard(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (now > last_heard_) last_heard_ = now;
}

absl::Status ServerLiveness::Check(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (!silent_.ok() || !watching_) return silent_;
  const absl::Duration silent = now - last_heard_;
  if (silent > timeout_) {
    silent_ = absl::UnavailableError(absl::StrCat(
        "group '", group_, "': the server ", server_, " sent nothing for ",
        absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(100))),
        " (heartbeat timeout ", absl::FormatDuration(timeout_),
        "); it may be down or unreachable"));
  }
  return silent_;
}

absl::Duration ServerLiveness::check_every() const {
  absl::MutexLock lock(&mu_);
  return check_every_;
}

}  // namespace fedgather
