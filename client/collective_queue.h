// CollectiveQueue: the thread that runs one Group's collectives, one at a
// time, in the order they were queued, so that their seqs follow that order
// on every rank whatever thread queued them.
//
// Thread safety: Add and Close may be called from any thread. Tasks run on
// the queue's own thread, never under its lock.
#ifndef FEDGATHER_CLIENT_COLLECTIVE_QUEUE_H_
#define FEDGATHER_CLIENT_COLLECTIVE_QUEUE_H_

#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace fedgather {

class CollectiveQueue {
 public:
  // A task is called once: with OK to run its collective, or with the
  // reason it will not run (then it must only complete its Work with it).
  using Task = std::function<void(const absl::Status& refused)>;

  CollectiveQueue();
  CollectiveQueue(const CollectiveQueue&) = delete;
  CollectiveQueue& operator=(const CollectiveQueue&) = delete;
  // Closes with CANCELLED, if Close was not called.
  ~CollectiveQueue();

  // Add queues `task` behind every task added before it. After Close, the
  // task is refused at once, on the caller's thread, with Close's status.
  void Add(Task task);

  // Shut refuses every task still waiting, and every later one, with `why`,
  // and lets the task that is running finish; it does not wait for it.
  // Later calls do nothing.
  void Shut(const absl::Status& why);
  // Close is Shut, then waits for the running task and joins the thread.
  void Close(const absl::Status& why);

 private:
  void RunTasks();

  absl::Mutex mu_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  absl::Mutex join_mu_;                           // one Close joins the thread
  absl::Status closed_ ABSL_GUARDED_BY(mu_);      // not OK once closed
  std::thread thread_ ABSL_GUARDED_BY(join_mu_);  // started by the constructor
};

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_COLLECTIVE_QUEUE_H_
