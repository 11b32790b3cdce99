// ServerMetrics: the server's Prometheus metrics, served in the text
// exposition format at http://<--metrics-listen>/metrics (prometheus-cpp's
// Exposer, its own civetweb threads).
//
// Counters and histograms come from two places:
//   * the server's events (it is an EventSink in the chain before the audit
//     log): rounds started, completed and failed (by group and status code),
//     round durations, denials (by action and code), limit hits (by limit);
//   * the working parts below it, through the ServerCounters interface
//     (server/events/server_counters.h): bytes in and out, the time to a
//     round's first chunk, streams open, connections refused.
// Gauges that describe the present (members by connection state, the data
// plane of each formed epoch, rounds in flight, buffered bytes against the
// limit, audit records written and dropped, whether the audit log can be
// written, its write failures, TCP connections open) are computed from a
// GroupRegistry, an AuditLog and OpenConnections at scrape time.
//
// Labels stay bounded: groups come from the policy (events about a group a
// caller only named, such as a refused join, are not labelled with it), and
// there are no rank, seq or identity labels.
//
// Thread safety: every method may be called from any thread, concurrently.
#ifndef FEDGATHER_SERVER_OBSERVE_SERVER_METRICS_H_
#define FEDGATHER_SERVER_OBSERVE_SERVER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/events/event_sink.h"
#include "server/events/server_counters.h"

namespace fedgather::server {

class AuditLog;
class GroupRegistry;
class OpenConnections;

class ServerMetrics : public EventSink, public ServerCounters {
 public:
  // Start serves /metrics on `listen` (HOST:PORT; port 0 picks one). Every
  // event goes on to `next` (may be null). INVALID_ARGUMENT for a malformed
  // address, UNAVAILABLE when it cannot listen. `clock` times rounds and
  // must outlive this object.
  static absl::StatusOr<std::unique_ptr<ServerMetrics>> Start(
      const std::string& listen, EventSink* next, Clock* clock = SystemClock());
  ~ServerMetrics() override;
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // The port /metrics is served on.
  int port() const;

  // Watch sets where the scrape-time gauges come from; either may be null.
  // Both must outlive this object. Call before the server serves.
  void Watch(const GroupRegistry* registry, const AuditLog* audit,
             int64_t max_buffered_bytes_per_round);

  // WatchConnections sets where fedgather_connections_open comes from.
  void WatchConnections(std::shared_ptr<const OpenConnections> open);

  void OnEvent(const ServerEvent& event) override;

  void BytesIn(const std::string& group, int64_t bytes) override;
  void BytesOut(const std::string& group, int64_t bytes) override;
  void FirstChunk(const std::string& group,
                  absl::Duration since_round_start) override;
  void StreamOpened(StreamKind kind) override;
  void StreamClosed(StreamKind kind) override;
  void ConnectionRefused(const std::string& limit) override;

 private:
  struct Impl;
  explicit ServerMetrics(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_OBSERVE_SERVER_METRICS_H_
