// fedgather-server: relays all_gather rounds between the members of its
// groups over mutual TLS. See README.md and docs/protocol.md.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/file_io.h"
#include "server/event_sink.h"
#include "server/fedgather_server.h"

namespace {

using fedgather::server::EventKindName;
using fedgather::server::EventSink;
using fedgather::server::ServerEvent;

// Writes one line per event to stderr.
class StderrEventLog : public EventSink {
 public:
  void OnEvent(const ServerEvent& event) override {
    std::string line =
        absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                                      absl::UTCTimeZone()),
                     " ", EventKindName(event.kind), " group=", event.group,
                     " epoch=", event.epoch);
    if (event.kind != fedgather::server::EventKind::kGroupFormed &&
        event.kind != fedgather::server::EventKind::kGroupDissolved &&
        event.kind != fedgather::server::EventKind::kJoinRefused &&
        event.kind != fedgather::server::EventKind::kMemberJoined) {
      absl::StrAppend(&line, " seq=", event.seq);
    }
    if (event.rank >= 0) absl::StrAppend(&line, " rank=", event.rank);
    if (!event.identity.empty())
      absl::StrAppend(&line, " identity=", event.identity);
    if (event.bytes > 0) absl::StrAppend(&line, " bytes=", event.bytes);
    if (!event.status.ok())
      absl::StrAppend(&line, " status=", event.status.ToString());
    absl::MutexLock lock(&mu_);
    std::cerr << line << std::endl;
  }

 private:
  absl::Mutex mu_;
};

absl::Duration Seconds(double s) { return absl::Milliseconds(s * 1000.0); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fedgather-server: federated all_gather relay over mutual TLS"};
  std::string listen = "0.0.0.0:50051";
  std::string port_file, cert, key, client_ca, groups_file;
  std::vector<std::string> group_flags;
  double round_timeout = 300, join_timeout = 300, heartbeat_interval = 1,
         heartbeat_timeout = 5;
  int64_t max_buffered_mib = 256;
  app.add_option("--listen", listen,
                 "HOST:PORT to listen on (port 0 picks one)")
      ->capture_default_str();
  app.add_option("--port-file", port_file, "write the bound port to this file");
  app.add_option("--cert", cert, "server certificate PEM")->required();
  app.add_option("--key", key, "server private key PEM")->required();
  app.add_option("--client-ca", client_ca,
                 "CA PEM that client certificates must chain to")
      ->required();
  app.add_option("--groups", groups_file, "groups YAML file");
  app.add_option("--group", group_flags,
                 "a group as NAME:WORLD_SIZE=ID1,ID2,... (repeatable)");
  app.add_option("--round-timeout", round_timeout, "seconds a round may take")
      ->capture_default_str();
  app.add_option("--join-timeout", join_timeout,
                 "seconds a group may take to form")
      ->capture_default_str();
  app.add_option("--heartbeat-interval", heartbeat_interval,
                 "seconds between member heartbeats")
      ->capture_default_str();
  app.add_option("--heartbeat-timeout", heartbeat_timeout,
                 "seconds of silence after which a member is lost")
      ->capture_default_str();
  app.add_option("--max-buffered-mib", max_buffered_mib,
                 "MiB of payload a round may buffer before uploaders wait")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; every usage error exits 2.
    return app.exit(e) == 0 ? 0 : 2;
  }

  fedgather::server::ServerOptions options;
  options.listen_address = listen;
  absl::StatusOr<fedgather::TlsFiles> tls =
      fedgather::ReadTlsFiles(cert, key, client_ca);
  if (!tls.ok()) {
    std::cerr << "fedgather-server: " << tls.status().message() << std::endl;
    return 2;
  }
  options.tls = *std::move(tls);
  if (!groups_file.empty()) {
    auto groups = fedgather::server::LoadGroupsFile(groups_file);
    if (!groups.ok()) {
      std::cerr << "fedgather-server: " << groups.status().message()
                << std::endl;
      return 2;
    }
    options.groups = *std::move(groups);
  }
  for (const std::string& flag : group_flags) {
    auto group = fedgather::server::ParseGroupFlag(flag);
    if (!group.ok()) {
      std::cerr << "fedgather-server: " << group.status().message()
                << std::endl;
      return 2;
    }
    options.groups.push_back(*std::move(group));
  }
  StderrEventLog events;
  options.limits.round_timeout = Seconds(round_timeout);
  options.limits.join_timeout = Seconds(join_timeout);
  options.limits.heartbeat_interval = Seconds(heartbeat_interval);
  options.limits.heartbeat_timeout = Seconds(heartbeat_timeout);
  options.limits.max_buffered_bytes_per_round = max_buffered_mib << 20;
  options.limits.events = &events;

  // Block the stop signals in every thread; one thread waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto server = fedgather::server::FedgatherServer::Start(std::move(options));
  if (!server.ok()) {
    std::cerr << "fedgather-server: " << server.status().message() << std::endl;
    return 1;
  }
  if (!port_file.empty()) {
    absl::Status written = fedgather::WriteStringToFile(
        port_file, absl::StrCat((*server)->port(), "\n"));
    if (!written.ok()) {
      std::cerr << "fedgather-server: " << written.message() << std::endl;
      return 1;
    }
  }
  std::cerr << "fedgather-server: listening on port " << (*server)->port()
            << std::endl;
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  std::cerr << "fedgather-server: signal " << signal_number << ", stopping"
            << std::endl;
  (*server)->Shutdown();
  return 0;
}
