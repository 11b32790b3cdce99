#include "server/observe/server_metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <exception>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/access/open_connections.h"
#include "server/membership/group_registry.h"
#include "server/observe/audit_log.h"

namespace fedgather::server {
namespace {

// Round durations and times to first byte: 5 ms to about 20 minutes.
prometheus::Histogram::BucketBoundaries SecondsBuckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,   2.5,
          5,     10,   30,    60,   120, 300,  600, 1200};
}

using RoundKey = std::tuple<std::string, uint64_t, uint64_t>;

// The gauges of the present, built at every scrape.
class StateCollectable : public prometheus::Collectable {
 public:
  void Watch(const GroupRegistry* registry, const AuditLog* audit,
             int64_t limit) {
    absl::MutexLock lock(&mu_);
    registry_ = registry;
    audit_ = audit;
    limit_ = limit;
  }
  void WatchConnections(std::shared_ptr<const OpenConnections> open) {
    absl::MutexLock lock(&mu_);
    open_ = std::move(open);
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    absl::MutexLock lock(&mu_);
    std::vector<prometheus::MetricFamily> families;
    if (registry_ != nullptr) {
      prometheus::MetricFamily members =
          Family("fedgather_members", "members of formed epochs, by connection",
                 prometheus::MetricType::Gauge);
      prometheus::MetricFamily rounds =
          Family("fedgather_rounds_in_flight", "rounds in flight",
                 prometheus::MetricType::Gauge);
      prometheus::MetricFamily plane =
          Family("fedgather_data_plane",
                 "1 for the data plane a formed epoch's collectives run on "
                 "(docs/protocol.md, \"Data planes\"), 0 for the other",
                 prometheus::MetricType::Gauge);
      prometheus::MetricFamily link_bytes = Family(
          "fedgather_peer_link_bytes",
          "bytes a member of a formed epoch reported its peer links moved "
          "this epoch: direction \"sent\" or \"received\" (its word, "
          "unchecked)",
          prometheus::MetricType::Gauge);
      prometheus::MetricFamily buffered = Family(
          "fedgather_buffered_bytes",
          "payload held for receivers that have not written it, summed over "
          "a group's rounds in flight",
          prometheus::MetricType::Gauge);
      for (const GroupState::Snapshot& group : registry_->Snapshots()) {
        const std::string& name = group.config.name;
        int connected = 0;
        for (const GroupState::MemberSnapshot& m : group.members) {
          connected += m.connected ? 1 : 0;
        }
        AddGauge(&members, {{"group", name}, {"state", "connected"}},
                 connected);
        AddGauge(&members, {{"group", name}, {"state", "disconnected"}},
                 static_cast<double>(group.members.size()) - connected);
        AddGauge(&rounds, {{"group", name}},
                 static_cast<double>(group.rounds.size()));
        for (size_t r = 0; r < group.members.size(); ++r) {
          const GroupState::MemberSnapshot& m = group.members[r];
          if (group.data_plane != v1::DATA_PLANE_DIRECT &&
              m.peer_link_bytes_sent == 0 && m.peer_link_bytes_received == 0) {
            continue;
          }
          const std::string rank = std::to_string(r);
          AddGauge(&link_bytes,
                   {{"group", name}, {"rank", rank}, {"direction", "sent"}},
                   static_cast<double>(m.peer_link_bytes_sent));
          AddGauge(&link_bytes,
                   {{"group", name}, {"rank", rank}, {"direction", "received"}},
                   static_cast<double>(m.peer_link_bytes_received));
        }
        if (group.formed) {
          const bool direct = group.data_plane == v1::DATA_PLANE_DIRECT;
          AddGauge(&plane, {{"group", name}, {"plane", "direct"}},
                   direct ? 1 : 0);
          AddGauge(&plane, {{"group", name}, {"plane", "relay"}},
                   direct ? 0 : 1);
        }
        int64_t bytes = 0;
        for (const Round::Progress& round : group.rounds) {
          bytes += round.buffered_bytes;
        }
        AddGauge(&buffered, {{"group", name}}, static_cast<double>(bytes));
      }
      prometheus::MetricFamily limit =
          Family("fedgather_buffered_bytes_limit",
                 "the most payload one round may buffer (--max-buffered-mib)",
                 prometheus::MetricType::Gauge);
      AddGauge(&limit, {}, static_cast<double>(limit_));
      families.push_back(std::move(members));
      families.push_back(std::move(rounds));
      families.push_back(std::move(plane));
      families.push_back(std::move(link_bytes));
      families.push_back(std::move(buffered));
      families.push_back(std::move(limit));
    }
    if (audit_ != nullptr) {
      families.push_back(
          Single("fedgather_audit_records_written_total",
                 "audit records written to the log (anchors excluded)",
                 prometheus::MetricType::Counter,
                 static_cast<double>(audit_->records_written())));
      families.push_back(Single(
          "fedgather_audit_writable",
          "1 while the audit log can be written; 0 while it cannot (joins "
          "and new rounds are refused)",
          prometheus::MetricType::Gauge, audit_->status().ok() ? 1 : 0));
      families.push_back(Single("fedgather_audit_write_failures_total",
                                "times writing the audit log started to fail",
                                prometheus::MetricType::Counter,
                                static_cast<double>(audit_->write_failures())));
      families.push_back(Single(
          "fedgather_audit_records_dropped_total",
          "audit records dropped: appended while the most that may wait in "
          "memory were waiting, or left unwritten at stop",
          prometheus::MetricType::Counter,
          static_cast<double>(audit_->records_dropped())));
    }
    if (open_ != nullptr) {
      prometheus::MetricFamily open = Family(
          "fedgather_connections_open",
          "TCP connections admitted by the connection caps and still open",
          prometheus::MetricType::Gauge);
      AddGauge(&open, {}, open_->Count());
      families.push_back(std::move(open));
    }
    return families;
  }

 private:
  static prometheus::MetricFamily Family(std::string name, std::string help,
                                         prometheus::MetricType type) {
    prometheus::MetricFamily family;
    family.name = std::move(name);
    family.help = std::move(help);
    family.type = type;
    return family;
  }
  // Single is a family of one unlabelled gauge or counter.
  static prometheus::MetricFamily Single(std::string name, std::string help,
                                         prometheus::MetricType type,
                                         double value) {
    prometheus::MetricFamily family =
        Family(std::move(name), std::move(help), type);
    prometheus::ClientMetric metric;
    if (type == prometheus::MetricType::Counter) {
      metric.counter.value = value;
    } else {
      metric.gauge.value = value;
    }
    family.metric.push_back(std::move(metric));
    return family;
  }
  static void AddGauge(prometheus::MetricFamily* family,
                       std::vector<prometheus::ClientMetric::Label> labels,
                       double value) {
    prometheus::ClientMetric metric;
    metric.label = std::move(labels);
    metric.gauge.value = value;
    family->metric.push_back(std::move(metric));
  }

  mutable absl::Mutex mu_;
  const GroupRegistry* registry_ ABSL_GUARDED_BY(mu_) = nullptr;
  const AuditLog* audit_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t limit_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<const OpenConnections> open_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

struct ServerMetrics::Impl {
  Clock* clock = nullptr;  // set once, before any event
  explicit Impl(const std::string& listen)
      : exposer(listen, /*num_threads=*/1),
        registry(std::make_shared<prometheus::Registry>()),
        state(std::make_shared<StateCollectable>()),
        rounds_started(prometheus::BuildCounter()
                           .Name("fedgather_rounds_started_total")
                           .Help("rounds that received their first header")
                           .Register(*registry)),
        rounds_completed(prometheus::BuildCounter()
                             .Name("fedgather_rounds_completed_total")
                             .Help("rounds that committed")
                             .Register(*registry)),
        rounds_failed(prometheus::BuildCounter()
                          .Name("fedgather_rounds_aborted_total")
                          .Help("rounds that failed on every rank, by the "
                                "status code they failed with")
                          .Register(*registry)),
        bytes_in(prometheus::BuildCounter()
                     .Name("fedgather_payload_bytes_received_total")
                     .Help("tensor payload bytes received from members")
                     .Register(*registry)),
        bytes_out(prometheus::BuildCounter()
                      .Name("fedgather_frame_bytes_sent_total")
                      .Help("frame bytes written to members' streams")
                      .Register(*registry)),
        denials(prometheus::BuildCounter()
                    .Name("fedgather_denials_total")
                    .Help("calls refused, by action and status code")
                    .Register(*registry)),
        limit_hits(prometheus::BuildCounter()
                       .Name("fedgather_limit_hits_total")
                       .Help("RESOURCE_EXHAUSTED refusals, by limit")
                       .Register(*registry)),
        round_seconds(prometheus::BuildHistogram()
                          .Name("fedgather_round_duration_seconds")
                          .Help("from a round's first header to its commit "
                                "or failure")
                          .Register(*registry)),
        first_byte_seconds(
            prometheus::BuildHistogram()
                .Name("fedgather_round_time_to_first_byte_seconds")
                .Help("from a round's first header to its first payload "
                      "chunk")
                .Register(*registry)),
        streams(prometheus::BuildGauge()
                    .Name("fedgather_streams_active")
                    .Help("open streams, by kind")
                    .Register(*registry)),
        connections_refused(
            prometheus::BuildCounter()
                .Name("fedgather_connections_refused_total")
                .Help("TCP connections refused before their TLS handshake, "
                      "by limit (per_address, total; no_fds counts the "
                      "accepts that found no free file descriptor)")
                .Register(*registry)) {}

  prometheus::Exposer exposer;
  std::shared_ptr<prometheus::Registry> registry;
  std::shared_ptr<StateCollectable> state;
  prometheus::Family<prometheus::Counter>& rounds_started;
  prometheus::Family<prometheus::Counter>& rounds_completed;
  prometheus::Family<prometheus::Counter>& rounds_failed;
  prometheus::Family<prometheus::Counter>& bytes_in;
  prometheus::Family<prometheus::Counter>& bytes_out;
  prometheus::Family<prometheus::Counter>& denials;
  prometheus::Family<prometheus::Counter>& limit_hits;
  prometheus::Family<prometheus::Histogram>& round_seconds;
  prometheus::Family<prometheus::Histogram>& first_byte_seconds;
  prometheus::Family<prometheus::Gauge>& streams;
  prometheus::Family<prometheus::Counter>& connections_refused;
  EventSink* next = nullptr;

  absl::Mutex mu;
  // When each round in flight received its first header.
  std::map<RoundKey, absl::Time> started ABSL_GUARDED_BY(mu);
};

absl::StatusOr<std::unique_ptr<ServerMetrics>> ServerMetrics::Start(
    const std::string& listen, EventSink* next, Clock* clock) {
  const size_t colon = listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics-listen must be HOST:PORT (port 0 picks one), not '", listen,
        "'"));
  }
  std::unique_ptr<Impl> impl;
  try {
    impl = std::make_unique<Impl>(listen);
    impl->clock = clock;
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen, ": ", e.what()));
  }
  impl->next = next;
  impl->exposer.RegisterCollectable(impl->registry);
  impl->exposer.RegisterCollectable(impl->state);
  return std::unique_ptr<ServerMetrics>(new ServerMetrics(std::move(impl)));
}

ServerMetrics::ServerMetrics(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

ServerMetrics::~ServerMetrics() = default;

int ServerMetrics::port() const {
  const std::vector<int> ports = impl_->exposer.GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

void ServerMetrics::Watch(const GroupRegistry* registry, const AuditLog* audit,
                          int64_t max_buffered_bytes_per_round) {
  impl_->state->Watch(registry, audit, max_buffered_bytes_per_round);
}

void ServerMetrics::WatchConnections(
    std::shared_ptr<const OpenConnections> open) {
  impl_->state->WatchConnections(std::move(open));
}

void ServerMetrics::OnEvent(const ServerEvent& event) {
  const std::string code = absl::StatusCodeToString(event.status.code());
  switch (event.kind) {
    case EventKind::kContributionStarted: {
      absl::MutexLock lock(&impl_->mu);
      const bool first = impl_->started
                             .emplace(RoundKey{event.group, event.epoch,
                                               event.seq.value_or(0)},
                                      impl_->clock->Now())
                             .second;
      if (first)
        impl_->rounds_started.Add({{"group", event.group}}).Increment();
      break;
    }
    case EventKind::kRoundCompleted:
    case EventKind::kRoundFailed: {
      const bool completed = event.kind == EventKind::kRoundCompleted;
      (completed ? impl_->rounds_completed.Add({{"group", event.group}})
                 : impl_->rounds_failed.Add(
                       {{"group", event.group}, {"reason", code}}))
          .Increment();
      absl::MutexLock lock(&impl_->mu);
      auto it = impl_->started.find(
          RoundKey{event.group, event.epoch, event.seq.value_or(0)});
      if (it != impl_->started.end()) {
        impl_->round_seconds.Add({{"group", event.group}}, SecondsBuckets())
            .Observe(absl::ToDoubleSeconds(impl_->clock->Now() - it->second));
        impl_->started.erase(it);
      }
      break;
    }
    case EventKind::kGroupDissolved: {
      // Rounds of an ended epoch that never reported are forgotten.
      absl::MutexLock lock(&impl_->mu);
      for (auto it = impl_->started.begin(); it != impl_->started.end();) {
        it = std::get<0>(it->first) == event.group &&
                     std::get<1>(it->first) <= event.epoch
                 ? impl_->started.erase(it)
                 : std::next(it);
      }
      break;
    }
    case EventKind::kAccessDenied:
    case EventKind::kJoinRefused:
    case EventKind::kCollectiveRefused:
      impl_->denials
          .Add({{"action", event.action.empty() ? EventKindName(event.kind)
                                                : event.action},
                {"reason", code}})
          .Increment();
      break;
    case EventKind::kLimitExceeded: {
      std::string limit = "unknown";
      for (const auto& [key, value] : event.details) {
        if (key == "limit") limit = value;
      }
      impl_->limit_hits.Add({{"limit", limit}}).Increment();
      break;
    }
    default:
      break;
  }
  if (impl_->next != nullptr) impl_->next->OnEvent(event);
}

void ServerMetrics::BytesIn(const std::string& group, int64_t bytes) {
  impl_->bytes_in.Add({{"group", group}}).Increment(static_cast<double>(bytes));
}

void ServerMetrics::BytesOut(const std::string& group, int64_t bytes) {
  impl_->bytes_out.Add({{"group", group}})
      .Increment(static_cast<double>(bytes));
}

void ServerMetrics::FirstChunk(const std::string& group,
                               absl::Duration since_round_start) {
  impl_->first_byte_seconds.Add({{"group", group}}, SecondsBuckets())
      .Observe(absl::ToDoubleSeconds(since_round_start));
}

void ServerMetrics::StreamOpened(StreamKind kind) {
  impl_->streams
      .Add({{"kind", kind == StreamKind::kSession ? "session" : "collective"}})
      .Increment();
}

void ServerMetrics::StreamClosed(StreamKind kind) {
  impl_->streams
      .Add({{"kind", kind == StreamKind::kSession ? "session" : "collective"}})
      .Decrement();
}

void ServerMetrics::ConnectionRefused(const std::string& limit) {
  impl_->connections_refused.Add({{"limit", limit}}).Increment();
}

}  // namespace fedgather::server
