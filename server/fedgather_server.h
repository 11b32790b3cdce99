// FedgatherServer: a running fedgather-server: the gRPC server over mutual
// TLS, its access control (policy, client-certificate checks, limits), its
// group registry, the audit log, and the timer thread that enforces join
// timeouts, heartbeats and round deadlines. Used by the fedgather-server
// binary and by tests that need a real server in-process.
#ifndef FEDGATHER_SERVER_FEDGATHER_SERVER_H_
#define FEDGATHER_SERVER_FEDGATHER_SERVER_H_

#include <grpcpp/server.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/tls_credentials.h"
#include "server/access/access_control.h"
#include "server/access/connection_gate.h"
#include "server/membership/group_registry.h"
#include "server/observe/audit_event_sink.h"
#include "server/observe/audit_log.h"
#include "server/observe/refusal_throttle.h"
#include "server/observe/server_metrics.h"
#include "server/rpc/admin_service.h"
#include "server/rpc/first_frame_deadlines.h"
#include "server/rpc/rendezvous_service.h"

namespace fedgather::server {

// AuditAdmission is OK for an audit log that can be written (`audit`, its
// status, is OK), and otherwise the UNAVAILABLE that refuses joins and new
// rounds: "the audit log cannot be written: <why>; the server admits no
// joins or rounds until it can".
absl::Status AuditAdmission(const absl::Status& audit);

struct ServerOptions {
  std::string listen_address = "127.0.0.1:0";  // port 0 picks a free port
  TlsFiles tls;                                // server cert, key, client CA
  std::string policy_path;                     // the access policy (required)
  std::string crl_path;                        // a PEM CRL; empty for none
  // The audit log; an empty audit.path keeps none. When audit_sign is set
  // and audit.signing_key_pem is empty, the server's TLS key signs anchors.
  AuditLogOptions audit;
  bool audit_sign = true;
  // Bounds on refusal records in the audit log and the server's log
  // (server/observe/refusal_throttle.h); its clock is set to `clock`.
  RefusalThrottleOptions refusal_records;
  GroupLimits limits;  // limits.events also gets every event
  // How often timers are checked; bounds how late a timeout is noticed.
  absl::Duration timer_period = absl::Milliseconds(100);
  // How long a new connection may take to finish its TLS handshake, and a
  // new Session or Collective stream to send its first message, before it
  // is closed (server/rpc/first_frame_deadlines.h).
  absl::Duration first_frame_timeout = absl::Seconds(10);
  // A connection with no open call (stream) for this long is closed with a
  // GOAWAY (GRPC_ARG_MAX_CONNECTION_IDLE_MS). The time runs from the end of
  // its TLS handshake, so it also bounds a connection that never opens one.
  absl::Duration connection_idle_timeout = absl::Seconds(60);
  // Connections beyond these caps are refused before their TLS handshake
  // (server/access/connection_gate.h).
  int max_connections = 1024;
  int max_connections_per_address = 128;
  // How often live sessions' certificates are verified again (expiry; a
  // reload also re-checks them at once).
  absl::Duration certificate_recheck_period = absl::Seconds(30);
  // The server's one time source: Start sets it in audit, refusal_records
  // and limits too, overriding theirs. Must outlive the server.
  Clock* clock = SystemClock();
  // HOST:PORT to serve Prometheus metrics on (server/observe/server_metrics.h;
  // port 0 picks one); empty serves none.
  std::string metrics_listen;
};

class FedgatherServer {
 public:
  // Start opens the audit log, loads the policy and CRL, binds and starts
  // serving. While the audit log cannot be written the server fails
  // closed: joins and new rounds get AuditAdmission's UNAVAILABLE and the
  // health service says NOT_SERVING (within one timer period). INVALID_ARGUMENT
  // for bad options or a bad policy or CRL (the message names the file), the
  // audit log's error, UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<FedgatherServer>> Start(
      ServerOptions options);

  // Stops serving: open streams are cancelled. Blocks until done.
  ~FedgatherServer();

  // port is the bound TCP port; metrics_port the /metrics one (0: none).
  int port() const { return port_; }
  int metrics_port() const;

  // ReloadPolicy re-reads the policy and CRL files (AccessControl::Reload);
  // `by` names who asked, e.g. "SIGHUP". Thread-safe.
  absl::Status ReloadPolicy(const std::string& by);

  // Wait blocks until the server is shut down.
  void Wait();

  // Drain prepares a graceful stop: the health service says NOT_SERVING,
  // new joins are refused, and rounds in flight get until `timeout` to
  // finish. Without a state directory no group starts a new round, rounds
  // still in flight at `timeout` fail on every rank with UNAVAILABLE naming
  // the drain timeout, and each epoch ends once its rounds are over. With
  // one (limits.state_dir) nothing ends: the epochs and the rounds still in
  // flight stay journaled, and their members resume them against the
  // restarted server within the resume grace (a planned restart is as
  // resumable as a crash). Blocks; call Shutdown after it.
  struct Drained {
    int rounds_failed = 0;  // failed at `timeout` (no state directory)
    int rounds_kept = 0;    // journaled in flight, to resume after a restart
  };
  Drained Drain(absl::Duration timeout);

  // Shutdown stops accepting calls, cancels open ones (after `grace`, which
  // lets streams that are finishing send their status), stops the timers,
  // records the stop and closes the audit log. Thread-safe; idempotent.
  // Returns the audit log's final status.
  absl::Status Shutdown(absl::Duration grace = absl::ZeroDuration());

 private:
  explicit FedgatherServer(ServerOptions options);
  void RunTimers();
  // WatchAuditLog, on the timer thread, turns the health service to
  // NOT_SERVING when the audit log stops being writable and back to SERVING
  // when it is again (unless draining), with one event each time.
  void WatchAuditLog();

  ServerOptions options_;
  std::unique_ptr<AuditLog> audit_log_;
  std::unique_ptr<AuditEventSink> audit_sink_;
  std::unique_ptr<RefusalThrottle> refusals_;  // before the audit sink
  std::unique_ptr<ServerMetrics> metrics_;     // outlives the gRPC server
  std::unique_ptr<ConnectionGate> gate_;       // stopped before the server
  std::unique_ptr<GroupRegistry> registry_;
  std::unique_ptr<AccessControl> access_;
  std::unique_ptr<FirstFrameDeadlines> first_frame_;
  std::unique_ptr<RendezvousService> service_;
  std::unique_ptr<AdminService> admin_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  absl::Notification stop_;
  std::thread timers_;
  bool audit_writable_ = true;  // the timer thread's view
  // Orders WatchAuditLog's health changes against Drain's NOT_SERVING.
  absl::Mutex health_mu_;
  std::once_flag shutdown_once_;
  absl::Status shutdown_status_;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_FEDGATHER_SERVER_H_
