// ServerCounters: what the server's working parts count as they go, for an
// exporter above them to publish (server/observe/server_metrics.h serves
// them to Prometheus). The parts that count hold a ServerCounters* that may
// be null; they include this header only, never the exporter.
//
//   * the rounds' data path: payload bytes in and out and the time to a
//     round's first forwarded chunk, by group (BytesIn, BytesOut,
//     FirstChunk);
//   * the reactors: streams open, by kind (StreamOpened, StreamClosed);
//   * the connection gate: connections refused, by limit
//     (ConnectionRefused).
//
// Thread safety: an implementation's methods may be called from any thread,
// concurrently, and must not block on the caller's locks.
#ifndef FEDGATHER_SERVER_EVENTS_SERVER_COUNTERS_H_
#define FEDGATHER_SERVER_EVENTS_SERVER_COUNTERS_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace fedgather::server {

enum class StreamKind { kSession, kCollective };

class ServerCounters {
 public:
  virtual ~ServerCounters() = default;

  virtual void BytesIn(const std::string& group, int64_t bytes) = 0;
  virtual void BytesOut(const std::string& group, int64_t bytes) = 0;
  virtual void FirstChunk(const std::string& group,
                          absl::Duration since_round_start) = 0;
  virtual void StreamOpened(StreamKind kind) = 0;
  virtual void StreamClosed(StreamKind kind) = 0;
  // ConnectionRefused counts one connection refused for `limit`
  // (per_address, total, no_fds).
  virtual void ConnectionRefused(const std::string& limit) = 0;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_EVENTS_SERVER_COUNTERS_H_
