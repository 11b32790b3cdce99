// ConnectionGate: the server's listening sockets. Its thread accepts each
// TCP connection, refuses it (closes it at once, before any TLS byte) when
// its peer address already holds max_per_address open connections or the
// server holds max_total, and hands the others to gRPC through an
// ExternalConnectionAcceptor, which runs the TLS handshake and HTTP/2 on
// them as on connections of its own port.
//
// gRPC 1.51 has no cap of its own on incoming connections (its accept loop
// drops them only under memory pressure, and stops listening for good on
// an accept error such as EMFILE); docs/decisions.md has the evidence. Here
// running out of fds is a refusal like the others: the gate backs off and
// accepts again.
//
// Refusals are counted in metrics (by limit) at once and reported as one
// kConnectionsRefused event per report_period at most, which sums them up
// (how many, by limit, and the addresses refused most).
//
// Threading: Bind, Start and Stop are called by the server's owner, in that
// order. The gate's thread calls the acceptor, the metrics and the event
// sink, never under a lock of the gate's.
#ifndef FEDGATHER_SERVER_ACCESS_CONNECTION_GATE_H_
#define FEDGATHER_SERVER_ACCESS_CONNECTION_GATE_H_

#include <grpcpp/server_builder.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/access/open_connections.h"
#include "server/events/event_sink.h"
#include "server/events/server_counters.h"

namespace fedgather::server {

struct ConnectionGateOptions {
  // HOST:PORT; port 0 picks one. 0.0.0.0 and [::] listen on every address
  // (IPv6 and IPv4 where the host has both).
  std::string listen_address;
  int max_total = 1024;       // open connections, all peers together
  int max_per_address = 128;  // open connections from one peer address
  absl::Duration report_period = absl::Seconds(10);
  EventSink* events = nullptr;        // may be null
  ServerCounters* metrics = nullptr;  // may be null
  // Times the report windows (poll still waits in real time); must outlive
  // the gate.
  Clock* clock = SystemClock();
};

class ConnectionGate {
 public:
  // Bind opens the listening sockets. INVALID_ARGUMENT for a malformed
  // address or caps below 1, UNAVAILABLE when it cannot bind (the message
  // names the address and the system's error).
  static absl::StatusOr<std::unique_ptr<ConnectionGate>> Bind(
      ConnectionGateOptions options);
  ~ConnectionGate();  // Stop
  ConnectionGate(const ConnectionGate&) = delete;
  ConnectionGate& operator=(const ConnectionGate&) = delete;

  // The bound port.
  int port() const { return port_; }
  // The connections handed to gRPC and still open; shared with the metrics.
  std::shared_ptr<const OpenConnections> open() const { return open_; }

  // Start accepts connections on the gate's thread and hands them to
  // `acceptor`. Call once, after the gRPC server has started: gRPC leaks a
  // connection handed to it before (or after) that.
  void Start(
      std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor);
  // Stop stops accepting, joins the thread and closes the listening
  // sockets (new connections are then refused by the system); connections
  // handed over stay gRPC's. Call before the gRPC server shuts down.
  // Idempotent.
  void Stop();

 private:
  enum Limit { kPerAddress, kTotal, kNoFds, kLimits };

  ConnectionGate(ConnectionGateOptions options, std::vector<int> listeners,
                 int port);
  void Run();
  // AcceptAll accepts from `listener` until it has no connection waiting;
  // false when the process is out of fds (the caller backs off).
  bool AcceptAll(int listener);
  void Admit(int fd, const std::string& address);
  void Refuse(int fd, const std::string& address, Limit limit);
  // Report emits the summary of the refusals since the last one, if any.
  void Report(absl::Time now);

  const ConnectionGateOptions options_;
  std::vector<int> listeners_;  // closed by Stop
  const int port_;
  int wake_[2] = {-1, -1};  // a pipe: Stop writes, Run returns
  std::shared_ptr<OpenConnections> open_ = std::make_shared<OpenConnections>();
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  std::thread thread_;

  // Refusals since the last report; the gate's thread only.
  int64_t refused_[kLimits] = {};
  std::map<std::string, int64_t> refused_by_address_;
  absl::Time window_start_ = absl::InfinitePast();
  absl::Time next_report_ = absl::InfinitePast();
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_ACCESS_CONNECTION_GATE_H_
