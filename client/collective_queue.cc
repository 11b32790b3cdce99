#include "client/collective_queue.h"

#include <utility>

namespace fedgather {

CollectiveQueue::CollectiveQueue() : thread_([this] { RunTasks(); }) {}

CollectiveQueue::~CollectiveQueue() {
  Close(absl::CancelledError("the group was closed"));
}

void CollectiveQueue::Add(Task task) {
  absl::Status closed;
  {
    absl::MutexLock lock(&mu_);
    if (closed_.ok()) {
      tasks_.push_back(std::move(task));
      return;
    }
    closed = closed_;
  }
  task(closed);
}

void CollectiveQueue::Shut(const absl::Status& why) {
  std::deque<Task> refused;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (!closed_.ok()) return;
    closed_ = why.ok() ? absl::CancelledError("the group was closed") : why;
    status = closed_;
    refused.swap(tasks_);
  }
  for (Task& task : refused) task(status);
}

void CollectiveQueue::Close(const absl::Status& why) {
  Shut(why);
  absl::MutexLock lock(&join_mu_);
  if (thread_.joinable()) thread_.join();
}

void CollectiveQueue::RunTasks() {
  for (;;) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](CollectiveQueue* q) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return !q->tasks_.empty() || !q->closed_.ok();
          },
          this));
      if (tasks_.empty()) return;  // closed
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task(absl::OkStatus());
  }
}

}  // namespace fedgather
