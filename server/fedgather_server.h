// FedgatherServer: a running fedgather-server: the gRPC server over mutual
// TLS, its group registry and the timer thread that enforces join timeouts,
// heartbeats and round deadlines. Used by the fedgather-server binary and by
// tests that need a real server in-process.
#ifndef FEDGATHER_SERVER_FEDGATHER_SERVER_H_
#define FEDGATHER_SERVER_FEDGATHER_SERVER_H_

#include <grpcpp/server.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/tls_credentials.h"
#include "server/group_config.h"
#include "server/group_registry.h"
#include "server/rendezvous_service.h"

namespace fedgather::server {

struct ServerOptions {
  std::string listen_address = "127.0.0.1:0";  // port 0 picks a free port
  TlsFiles tls;                                // server cert, key, client CA
  std::vector<GroupConfig> groups;
  GroupLimits limits;
  // How often timers are checked; bounds how late a timeout is noticed.
  absl::Duration timer_period = absl::Milliseconds(100);
  std::function<absl::Time()> clock = [] { return absl::Now(); };
};

class FedgatherServer {
 public:
  // Start binds and starts serving. INVALID_ARGUMENT for bad options,
  // UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<FedgatherServer>> Start(
      ServerOptions options);

  // Stops serving: open streams are cancelled. Blocks until done.
  ~FedgatherServer();

  // port is the bound TCP port.
  int port() const { return port_; }

  // Wait blocks until the server is shut down.
  void Wait();

  // Shutdown stops accepting calls, cancels open ones, and stops the timers.
  // Thread-safe; idempotent.
  void Shutdown();

 private:
  explicit FedgatherServer(ServerOptions options);
  void RunTimers();

  ServerOptions options_;
  GroupRegistry registry_;
  RendezvousService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  absl::Notification stop_;
  std::thread timers_;
  std::once_flag shutdown_once_;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_FEDGATHER_SERVER_H_
