// FirstFrameDeadlines: the streams that have not sent their first message
// yet, each with a deadline. A peer that opens a Session or Collective
// stream and then sends nothing (slowloris) would otherwise hold a reactor,
// a stream slot of its identity's max_concurrent_streams and, for a
// session, a group slot, for as long as its connection lives. The server's
// timer thread calls Expire; each stream still waiting past its deadline is
// finished with DEADLINE_EXCEEDED (FirstFrameWaiter).
//
// Threading: every method is thread-safe. Expire calls the streams without
// holding the lock.
#ifndef FEDGATHER_SERVER_RPC_FIRST_FRAME_DEADLINES_H_
#define FEDGATHER_SERVER_RPC_FIRST_FRAME_DEADLINES_H_

#include <deque>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fedgather::server {

// A stream that waits for its peer's first message.
class FirstFrameWaiter {
 public:
  virtual ~FirstFrameWaiter() = default;
  // ExpireFirstFrameWait finishes the stream with DEADLINE_EXCEEDED naming
  // `limit`, unless its first message has arrived (then it does nothing).
  virtual void ExpireFirstFrameWait(absl::Duration limit) = 0;
};

class FirstFrameDeadlines {
 public:
  explicit FirstFrameDeadlines(absl::Duration limit) : limit_(limit) {}

  // Watch gives `stream`, opened at `now`, until now + limit to send its
  // first message. Holds only a weak reference.
  void Watch(std::weak_ptr<FirstFrameWaiter> stream, absl::Time now);
  // Expire calls ExpireFirstFrameWait on every stream still alive whose
  // deadline is at or before `now`, and forgets them.
  void Expire(absl::Time now);
  // How many streams are watched: those opened within the last `limit`
  // and not yet expired, whether or not their first message came.
  size_t watched() const;

 private:
  const absl::Duration limit_;
  mutable absl::Mutex mu_;
  // In deadline order: every stream gets the same limit.
  std::deque<std::pair<absl::Time, std::weak_ptr<FirstFrameWaiter>>> waiting_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_RPC_FIRST_FRAME_DEADLINES_H_
