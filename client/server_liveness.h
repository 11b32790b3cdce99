// ServerLiveness: whether the server of one group's session still speaks.
// The server answers each session heartbeat (docs/protocol.md), so a member
// that hears nothing from it, on the session or any collective stream, for
// the group's heartbeat timeout takes it for down or unreachable, as the
// server takes a member that sends nothing for as long.
//
// It watches only while a session stream is established: a session that
// broke is resumed within its own grace, and a dead server is one that
// stays silent on a connection that looks open (a hung process, a network
// that drops everything).
//
// Thread safety: every method may be called from any thread. Heard is
// called for every frame received and takes one short lock.
#ifndef FEDGATHER_CLIENT_SERVER_LIVENESS_H_
#define FEDGATHER_CLIENT_SERVER_LIVENESS_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fedgather {

class ServerLiveness {
 public:
  // `server` (HOST:PORT) and `group` name what Check reports.
  ServerLiveness(std::string server, std::string group);

  // Watch starts watching as of `now`, which counts as heard: from then on
  // the server must send something at least every `timeout` (zero: never
  // checked). Check is worth calling every `check_every`.
  void Watch(absl::Duration timeout, absl::Duration check_every,
             absl::Time now);
  // Pause stops watching until the next Watch (the session broke).
  void Pause();
  // Heard records that something arrived from the server at `now`.
  void Heard(absl::Time now);

  // Check returns UNAVAILABLE naming the server, the group and the silence
  // once the server has been silent for longer than the timeout while
  // watched; OK otherwise. Once it has failed it always returns that status.
  absl::Status Check(absl::Time now);
  absl::Duration check_every() const;

 private:
  const std::string server_;
  const std::string group_;
  mutable absl::Mutex mu_;
  bool watching_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration timeout_ ABSL_GUARDED_BY(mu_);
  absl::Duration check_every_ ABSL_GUARDED_BY(mu_) = absl::Seconds(1);
  absl::Time last_heard_ ABSL_GUARDED_BY(mu_);
  absl::Status silent_ ABSL_GUARDED_BY(mu_);  // sticky, once not OK
};

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_SERVER_LIVENESS_H_
