#include "server/rpc/first_frame_deadlines.h"

#include <vector>

namespace fedgather::server {

void FirstFrameDeadlines::Watch(std::weak_ptr<FirstFrameWaiter> stream,
                                absl::Time now) {
  absl::MutexLock lock(&mu_);
  waiting_.emplace_back(now + limit_, std::move(stream));
}

void FirstFrameDeadlines::Expire(absl::Time now) {
  std::vector<std::shared_ptr<FirstFrameWaiter>> expired;
  {
    absl::MutexLock lock(&mu_);
    while (!waiting_.empty() && waiting_.front().first <= now) {
      if (auto stream = waiting_.front().second.lock()) {
        expired.push_back(std::move(stream));
      }
      waiting_.pop_front();
    }
  }
  for (const auto& stream : expired) stream->ExpireFirstFrameWait(limit_);
}

size_t FirstFrameDeadlines::watched() const {
  absl::MutexLock lock(&mu_);
  return waiting_.size();
}

}  // namespace fedgather::server
