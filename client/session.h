// Session: this participant's membership of a group on the server (the
// control plane's side of a Group): the join, the session stream with its
// heartbeats, its resume after a break, and the leave. It knows nothing of
// collectives; Group (client/group.h) runs them and asks the session
// whether it still stands.
//
// Threads: Join runs on the caller's thread; once it succeeds the session
// keeps two threads, one that reads the stream until it ends (and resumes a
// broken one within the grace) and one that writes heartbeats. Every other
// method may be called from any thread. docs/threading.md has the detail.
#ifndef FEDGATHER_CLIENT_SESSION_H_
#define FEDGATHER_CLIENT_SESSION_H_

#include <grpcpp/channel.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/server_liveness.h"
#include "common/clock.h"
#include "common/content_hasher.h"
#include "fedgather/v1/fedgather.grpc.pb.h"

namespace fedgather {

class Session {
 public:
  // `server` (HOST:PORT) names the server in errors; `group` is the name
  // the session joins. A broken stream is resumed within `resume_grace`
  // (zero: a break ends the session). `clock` must outlive the session.
  Session(std::shared_ptr<grpc::Channel> channel, std::string server,
          std::string group, absl::Duration resume_grace, Clock* clock);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  // Leaves (Leave) if the session still stands, and joins its threads.
  ~Session();

  // Join writes the join request and blocks until the group forms (at most
  // `timeout`). A stream that broke before the server answered is opened
  // again, with backoff, for up to `connect_timeout`. Errors: the server's
  // decision (PERMISSION_DENIED, INVALID_ARGUMENT, ...), DEADLINE_EXCEEDED,
  // UNAVAILABLE. Call it once; the accessors below are valid after it
  // succeeded.
  absl::Status Join(const v1::JoinRequest& request, absl::Duration timeout,
                    absl::Duration connect_timeout);

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  uint64_t epoch() const { return epoch_; }
  int64_t max_chunk_bytes() const { return max_chunk_bytes_; }
  // The hash the epoch names contributions by (Joined.digest_algorithm).
  DigestAlgorithm digest_algorithm() const { return digest_algorithm_; }
  const std::vector<std::string>& identities() const { return identities_; }
  // Each member's peer endpoint, by rank ("" for none): the rendezvous of
  // the direct data plane (docs/protocol.md, "Peer links").
  const std::vector<std::string>& peer_endpoints() const {
    return peer_endpoints_;
  }
  // The server's CRLs (PEM, Joined.peer_crl) when this member offered a
  // peer endpoint; else, or when the server has none, empty.
  const std::string& peer_crl() const { return peer_crl_; }
  // The epoch's data plane and why the server chose it (Joined): DIRECT
  // there is a candidate, settled by ReportPeerLinks and AwaitDataPlane.
  v1::DataPlane data_plane() const { return data_plane_; }
  const std::string& data_plane_reason() const { return data_plane_reason_; }

  // ReportPeerLinks tells the server how this member's peer links went
  // (PeerLinks: OK, or the error). UNAVAILABLE when the session is broken.
  absl::Status ReportPeerLinks(const absl::Status& links);
  // ReportPeerRefusal tells the server of a connection this member's peer
  // listener refused (PeerRefusal), for its audit. Best effort: nothing
  // when the session is broken. Any thread.
  void ReportPeerRefusal(const absl::Status& refusal);
  // AwaitDataPlane waits for the server's DataPlaneChosen, at most until
  // `deadline` (DEADLINE_EXCEEDED), and returns it; the session's status
  // when it ends first.
  absl::StatusOr<v1::DataPlaneChosen> AwaitDataPlane(absl::Time deadline);

  // liveness is what this member has heard from the server lately (the
  // collective streams report what they hear to it too). Owned here.
  ServerLiveness* liveness() { return &liveness_; }

  // Check returns OK while the session stands; else why it ended. When the
  // server has been silent past the heartbeat timeout it ends the session
  // with that UNAVAILABLE (no resume) and returns it.
  absl::Status Check();

  // BeginLeave marks the session as leaving: from now on its end reads
  // CANCELLED, and a resume opens no new stream. Never blocks.
  void BeginLeave();
  // Leave tells the server this member leaves (a leave message; skipped
  // when the server was found silent, since the write could wait on it),
  // gives it up to 2 s to end the session on that, then cancels the stream
  // and wakes a resume's backoff. Blocks that long at most; call it once,
  // after BeginLeave.
  void Leave();

 private:
  // OpenSession opens a session stream, writes `request` and reads the
  // Joined answer (at most `timeout`); `server_final` tells whether a
  // failure came from the server's decision rather than a broken stream.
  absl::StatusOr<v1::Joined> OpenSession(const v1::JoinRequest& request,
                                         absl::Duration timeout,
                                         bool* server_final);
  // RunSession reads the session until it ends; a broken one is resumed
  // (ResumeSession) within the grace.
  void RunSession();
  absl::Status ResumeSession(absl::string_view why);
  void StartHeartbeats();
  void StopHeartbeats();
  // CheckServer returns liveness_'s verdict; when the server is silent it
  // also ends the session with that status (no resume).
  absl::Status CheckServer();

  std::unique_ptr<v1::Rendezvous::Stub> stub_;
  const std::string name_;
  int rank_ = 0;
  int world_size_ = 0;
  uint64_t epoch_ = 0;
  int64_t max_chunk_bytes_ = 0;
  DigestAlgorithm digest_algorithm_ = DigestAlgorithm::kBlake3;
  absl::Duration heartbeat_interval_;
  absl::Duration heartbeat_timeout_;
  // What this member has heard from the server lately; watched while a
  // session stream is established.
  ServerLiveness liveness_;
  std::vector<std::string> identities_;
  std::vector<std::string> peer_endpoints_;
  std::string peer_crl_;
  v1::DataPlane data_plane_ = v1::DATA_PLANE_RELAY;
  std::string data_plane_reason_;

  const absl::Duration resume_grace_;
  Clock* const clock_;
  bool left_ = false;  // Leave ran; touched by the owner's thread only
  // The session stream now; replaced only by the session thread, while no
  // heartbeat thread runs, under write_mu_, which every write holds.
  absl::Mutex write_mu_;
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionEvent>>
      session_;
  std::thread session_thread_;       // reads until the session ends
  absl::Notification session_over_;  // the session thread is done
  std::thread heartbeat_thread_;     // one per session stream
  std::unique_ptr<absl::Notification> stop_heartbeats_;
  absl::Notification leave_;  // wakes a resume's backoff

  absl::Mutex mu_;
  // The context of the session stream now (cancelled to leave).
  std::unique_ptr<grpc::ClientContext> session_context_ ABSL_GUARDED_BY(mu_);
  absl::Status session_status_ ABSL_GUARDED_BY(mu_);  // set when it ends
  // The server's DataPlaneChosen, once it arrived.
  std::optional<v1::DataPlaneChosen> data_plane_chosen_ ABSL_GUARDED_BY(mu_);
  bool leaving_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_SESSION_H_
