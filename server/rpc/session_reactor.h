// SessionReactor: the server side of one member's Session stream. The first
// message joins a group; later ones are heartbeats, each answered with a
// heartbeat event, so that the member can tell a live server from a silent
// one. The stream lives as long as the membership: when it ends, the group
// learns the member is gone.
//
// Threading: gRPC runs the reactions on its callback threads. The group calls
// SendJoined and Close from any thread, never under its lock. mu_ guards the
// write and finish state; at most one write is in flight, and the events
// waiting for it are queued (the Joined) or coalesced (heartbeat answers).
// Nothing is written once Finish is called.
#ifndef FEDGATHER_SERVER_RPC_SESSION_REACTOR_H_
#define FEDGATHER_SERVER_RPC_SESSION_REACTOR_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/server_callback.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "fedgather/v1/fedgather.pb.h"
#include "server/access/access_control.h"
#include "server/membership/group_registry.h"
#include "server/rpc/first_frame_deadlines.h"

namespace fedgather::server {

class SessionReactor
    : public grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent>,
      public SessionStream,
      public RevocableSession,
      public FirstFrameWaiter,
      public std::enable_shared_from_this<SessionReactor> {
 public:
  // Start creates a reactor that keeps itself alive until OnDone. When
  // `admission` is an error the stream is finished with it at once. The
  // join is authorized by `access` (role participant) and holds one of the
  // caller's max_groups until the session ends.
  // A session the server closes carries the trailing metadata
  // kFinalStatusKey: the client does not resume it.
  // An admitted session is watched by `first_frame`: without a join by its
  // deadline it is refused.
  static SessionReactor* Start(grpc::CallbackServerContext* context,
                               GroupRegistry* registry, AccessControl* access,
                               FirstFrameDeadlines* first_frame,
                               absl::StatusOr<Admission> admission,
                               Clock* clock);

  // SendJoined sends `joined`, with the server's CRL (Joined.peer_crl) when
  // this member offered a peer endpoint.
  void SendJoined(const v1::Joined& joined) override;
  void SendDataPlane(const v1::DataPlaneChosen& chosen) override;
  void Close(const absl::Status& status) override;
  // Revoke finishes the session with `status` and leaves the group, whose
  // epoch then ends naming this member and `status`'s message.
  void Revoke(const absl::Status& status) override;
  // Refuses the session with DEADLINE_EXCEEDED (logged as a refused join)
  // unless its join has arrived.
  void ExpireFirstFrameWait(absl::Duration limit) override;

 private:
  SessionReactor(grpc::CallbackServerContext* context, GroupRegistry* registry,
                 AccessControl* access, Admission admission, Clock* clock);

  grpc::CallbackServerContext* const context_;
  // HandleJoin runs the first message; returns the refusal, if any.
  absl::Status HandleJoin(PendingCallbacks* callbacks);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  // StartNextWrite starts the next queued event's write, unless a write is
  // in flight (its OnWriteDone calls it again) or the stream is finishing.
  void StartNextWrite();
  // NextEventLocked moves the next queued event into event_; false when
  // none is queued.
  bool NextEventLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Lost reports, once, that the member is gone (`why`), then finishes the
  // stream with `finish`, or CANCELLED when that is OK.
  // `left`: the member said Leave, so no resume is waited for.
  void Lost(absl::string_view why, const absl::Status& finish = {},
            bool left = false);

  GroupRegistry* const registry_;
  AccessControl* const access_;
  const Caller caller_;
  IdentityUsage::Lease stream_lease_;  // released when the reactor is freed
  Clock* const clock_;
  std::shared_ptr<SessionReactor> self_;  // released in OnDone
  bool counted_ = false;  // an admitted stream, counted in the metrics

  // Touched only by the read path (one read in flight).
  v1::SessionRequest request_;
  GroupState* group_ = nullptr;  // set by the join; read under mu_ elsewhere

  absl::Mutex mu_;
  v1::SessionEvent event_ ABSL_GUARDED_BY(mu_);  // the write in flight
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;  // no more writes then
  // Queued events: the Joined goes first; heartbeats that arrive while a
  // write is in flight are answered by one heartbeat event after it.
  std::optional<v1::Joined> joined_ ABSL_GUARDED_BY(mu_);
  std::optional<v1::DataPlaneChosen> data_plane_ ABSL_GUARDED_BY(mu_);
  bool heartbeat_owed_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool lost_ ABSL_GUARDED_BY(mu_) = false;
  // The first message arrived; a session expired before that is lost_.
  bool first_message_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status pending_finish_ ABSL_GUARDED_BY(mu_);
  bool has_pending_finish_ ABSL_GUARDED_BY(mu_) = false;
  // One of the caller's max_groups, from a successful join until Lost.
  IdentityUsage::Lease group_lease_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_RPC_SESSION_REACTOR_H_
