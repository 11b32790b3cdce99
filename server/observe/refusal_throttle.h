// RefusalThrottle: bounds what callers the server refuses can make it
// write. It sits in the event chain before the audit log and the server's
// log and passes every event but refusals (kAccessDenied, kLimitExceeded)
// on untouched; honest records (joins, rounds, aborts, ...) are never
// shortened, merged or dropped. For refusals (docs/security.md, "Bounds on
// refusal records"):
//
//  * Field bound: every string the caller controls (identity, peer, group,
//    action, reason, detail values: a certificate's claimed identity and
//    issuer reach the reason) is cut to max_field_bytes, at a UTF-8
//    boundary, and marked "…(+N bytes)".
//  * Repeats: the first refusal of a key (kind, action, group, identity,
//    peer address without its port, status) passes at once; repeats of
//    the key within `window` of it are counted, and when the window ends one
//    copy of the first passes again with details repeats=N, window_start,
//    window_end.
//  * Budget: each refusal passed (first or summary) costs its estimated
//    record bytes from a bucket refilled at bytes_per_second, holding at
//    most burst_bytes. A refusal the bucket cannot pay, or the first of a
//    key beyond max_keys open windows, is not passed but counted; one
//    "refusals_suppressed" event per window reports the count and when.
//
// Windows close on the next refusal after them or in CloseWindows, which the
// server's timer thread calls; Flush closes them all when the server stops.
//
// Thread safety: thread-safe; events are passed on outside its lock.
#ifndef FEDGATHER_SERVER_OBSERVE_REFUSAL_THROTTLE_H_
#define FEDGATHER_SERVER_OBSERVE_REFUSAL_THROTTLE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/events/event_sink.h"

namespace fedgather::server {

struct RefusalThrottleOptions {
  size_t max_field_bytes = 256;
  absl::Duration window = absl::Seconds(10);
  int64_t bytes_per_second = 16 << 10;
  int64_t burst_bytes = 64 << 10;
  size_t max_keys = 1024;
  Clock* clock = SystemClock();
};

// BoundField returns `text` if it is at most `max_bytes` long, else its
// first max_bytes bytes (fewer, so as not to split a UTF-8 character)
// followed by "…(+N bytes)", N being the bytes cut.
std::string BoundField(const std::string& text, size_t max_bytes);

class RefusalThrottle : public EventSink {
 public:
  // `next` may be null, else must outlive the throttle.
  RefusalThrottle(RefusalThrottleOptions options, EventSink* next);

  void OnEvent(const ServerEvent& event) override ABSL_LOCKS_EXCLUDED(mu_);

  // CloseWindows passes on the summaries of the windows that ended by
  // `now`, and the suppressed count once its window ended.
  void CloseWindows(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // Flush passes on every open window's summary and the suppressed count
  // now, ended or not, so that a stopping server loses no count.
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // (kind, action, group, identity, peer host, status), bounded
  using Key = std::tuple<int, std::string, std::string, std::string,
                         std::string, std::string>;
  struct Window {
    ServerEvent first;  // bounded
    absl::Time start;
    uint64_t repeats = 0;
  };

  // CloseWindowsLocked adds what ends by `now` (everything when `all`) to
  // `out`.
  void CloseWindowsLocked(absl::Time now, bool all,
                          std::vector<ServerEvent>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PayLocked takes `event`'s cost from the bucket; false (and the event
  // counted as suppressed) when it cannot pay.
  bool PayLocked(const ServerEvent& event, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SuppressLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PassOn(const std::vector<ServerEvent>& events);

  const RefusalThrottleOptions options_;
  EventSink* const next_;

  absl::Mutex mu_;
  std::map<Key, Window> windows_ ABSL_GUARDED_BY(mu_);
  double tokens_ ABSL_GUARDED_BY(mu_);
  absl::Time refilled_ ABSL_GUARDED_BY(mu_);
  uint64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time first_suppressed_ ABSL_GUARDED_BY(mu_);
  absl::Time last_suppressed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_OBSERVE_REFUSAL_THROTTLE_H_
