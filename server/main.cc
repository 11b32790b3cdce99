// fedgather-server: relays all_gather rounds between the members of its
// groups over mutual TLS. See docs/server.md and docs/protocol.md.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/file_io.h"
#include "common/tls_credentials.h"
#include "server/fedgather_server.h"
#include "server/observe/event_log.h"
#include "server/yaml_config.h"

namespace {

using fedgather::server::EventLog;
using fedgather::server::LogLevel;

absl::StatusOr<fedgather::server::AuditFsync> ParseFsync(
    const std::string& text) {
  if (text == "record") return fedgather::server::AuditFsync::kEveryRecord;
  if (text == "group") return fedgather::server::AuditFsync::kGroupCommit;
  if (text == "off") return fedgather::server::AuditFsync::kOff;
  return absl::InvalidArgumentError(absl::StrCat(
      "--audit-fsync '", text, "': expected record, group or off"));
}

absl::Duration Seconds(double s) { return absl::Milliseconds(s * 1000.0); }

// IsLoopbackListen says whether HOST:PORT `listen` binds only the loopback
// interface: 127.0.0.0/8, [::1] or localhost.
bool IsLoopbackListen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return false;
  const std::string host = listen.substr(0, colon);
  if (host == "localhost" || host == "[::1]") return true;
  in_addr ipv4;
  return inet_pton(AF_INET, host.c_str(), &ipv4) == 1 &&
         (ntohl(ipv4.s_addr) >> 24) == 127;
}

// Files the server keeps open besides its connections: listeners, the audit
// log, journals, gRPC's own, the metrics endpoint's.
constexpr rlim_t kFilesBesidesConnections = 256;

// RaiseFileLimit raises the soft RLIMIT_NOFILE towards `needed` (up to the
// hard limit) and returns the soft limit it leaves.
rlim_t RaiseFileLimit(rlim_t needed) {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0) return 0;
  if (files.rlim_cur < needed) {
    rlimit raised = files;
    raised.rlim_cur = std::min(needed, files.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) files = raised;
  }
  return files.rlim_cur;
}

constexpr char kPlaintextWarning[] =
    "****************************************************************\n"
    "* fedgather-server: --insecure-plaintext-for-benchmarks         *\n"
    "* NO TLS: every byte is sent in the clear, and each caller's    *\n"
    "* identity is TRUSTED from its fedgather-plaintext-identity     *\n"
    "* header, unverified. For benchmarks on loopback only.          *\n"
    "****************************************************************\n";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fedgather-server: federated all_gather relay over mutual TLS"};
  std::string listen = "0.0.0.0:50051";
  std::string port_file, cert, key, client_ca, policy, crl, audit_log;
  std::string audit_fsync = "group";
  int64_t audit_rotate_mib = 64;
  int audit_anchor_every = 1000;
  bool audit_unsigned = false;
  fedgather::server::RefusalThrottleOptions refusal_records;
  double refusal_window = absl::ToDoubleSeconds(refusal_records.window);
  double cert_recheck = 30;
  double round_timeout = 300, join_timeout = 300, heartbeat_interval = 1,
         heartbeat_timeout = 5, first_frame_timeout = 10;
  double connection_idle_timeout = 60;
  int max_connections = 1024, max_connections_per_address = 128;
  int64_t max_buffered_mib = 256;
  double resume_grace = 10;
  int64_t resume_window_mib = 32;
  bool insecure_plaintext = false;
  std::string state_dir;
  std::string metrics_listen;
  double drain_timeout = 30;
  std::string log_format = "json", log_level = "info";
  app.add_option("--listen", listen,
                 "HOST:PORT to listen on (port 0 picks one)")
      ->capture_default_str();
  app.add_option("--port-file", port_file, "write the bound port to this file");
  app.add_option("--cert", cert, "server certificate PEM")->required();
  app.add_option("--key", key, "server private key PEM")->required();
  app.add_option("--client-ca", client_ca,
                 "CA PEM that client certificates must chain to")
      ->required();
  app.add_option("--policy", policy,
                 "access policy YAML (groups, roles, limits); reloaded on "
                 "SIGHUP")
      ->required();
  app.add_option("--crl", crl,
                 "PEM certificate revocation list; reloaded with the policy");
  app.add_option("--audit-log", audit_log,
                 "hash-chained JSON-lines audit log to append to");
  app.add_option("--audit-fsync", audit_fsync,
                 "record (fsync each record), group (fsync each batch) or off")
      ->capture_default_str();
  app.add_option("--audit-rotate-mib", audit_rotate_mib,
                 "rotate the audit log at this size (0: never)")
      ->capture_default_str();
  app.add_option("--audit-anchor-every", audit_anchor_every,
                 "records between signed anchors of the audit chain")
      ->capture_default_str();
  app.add_flag("--audit-unsigned", audit_unsigned,
               "do not sign the audit chain with the server key");
  app.add_option("--refusal-field-bytes", refusal_records.max_field_bytes,
                 "refused callers' identity, peer, group and reason are cut "
                 "to this many bytes in the audit log and the server's log")
      ->capture_default_str();
  app.add_option("--refusal-window", refusal_window,
                 "seconds over which repeated refusals of one caller are "
                 "counted into one record")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--refusal-bytes-per-second", refusal_records.bytes_per_second,
                 "budget of refusal record bytes per second (burst: 4 s of "
                 "it); refusals beyond it are counted, not recorded one by "
                 "one")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--cert-recheck-seconds", cert_recheck,
                 "seconds between re-checks of live sessions' certificates "
                 "(expiry, CRL)")
      ->capture_default_str();
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
  app.add_option("--first-frame-timeout", first_frame_timeout,
                 "seconds a new connection may take to finish its TLS "
                 "handshake, and a new stream to send its first message")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--connection-idle-timeout", connection_idle_timeout,
                 "seconds a connection may stay without an open call (from "
                 "its TLS handshake or its last call's end) before it is "
                 "closed; a member's session keeps its connection busy")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-connections", max_connections,
                 "open client connections, all addresses together; more are "
                 "refused before the TLS handshake")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-connections-per-address", max_connections_per_address,
                 "open client connections from one IP address; more are "
                 "refused before the TLS handshake")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-buffered-mib", max_buffered_mib,
                 "MiB of payload a round may buffer before uploaders wait")
      ->capture_default_str();
  app.add_option("--resume-grace", resume_grace,
                 "seconds a member may take to resume a broken collective "
                 "stream (0: a broken stream fails the round)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--resume-window-mib", resume_window_mib,
                 "MiB of delivered frames a round keeps for resumed downloads")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--state-dir", state_dir,
                 "directory for durable rounds: groups journal their epochs "
                 "and rounds in flight there, and a restarted server "
                 "restores them so members resume (needs --resume-grace > "
                 "0; created 0700 if missing)");
  app.add_option("--metrics-listen", metrics_listen,
                 "HOST:PORT to serve Prometheus metrics on, at /metrics "
                 "(plain HTTP; default: none)");
  app.add_option("--drain-timeout", drain_timeout,
                 "on SIGTERM or SIGINT: seconds rounds in flight get to "
                 "finish (new joins are refused at once). Without "
                 "--state-dir, new rounds are refused too and those still "
                 "in flight are then aborted; with it, the epochs and their "
                 "rounds stay journaled for members to resume after the "
                 "restart")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--log-format", log_format,
                 "json (one object per line) or text")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "debug, info, warning or error")
      ->capture_default_str();
  app.config_formatter(std::make_shared<fedgather::server::YamlConfig>());
  app.set_config("--config", "",
                 "YAML file of flags (names without the leading --, e.g. "
                 "'listen: 0.0.0.0:50051'); flags given here take precedence "
                 "(example: deploy/fedgather-server.example.yaml)");
  app.allow_config_extras(false);
  bool check_config = false;
  app.add_flag("--check-config", check_config,
               "print the settings the flags and --config make, as YAML, and "
               "exit")
      ->configurable(false);
  app.add_flag("--insecure-plaintext-for-benchmarks", insecure_plaintext,
               "benchmarks only: no TLS, and callers' identities are taken "
               "unverified from a request header; --listen must be a "
               "loopback address (the TLS files are still read: the key "
               "signs the audit log)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ConfigError& e) {
    // CLI11 says "INI was not able to parse KEY" for a key that is no flag.
    std::string message = e.what();
    const std::string unknown = "INI was not able to parse ";
    if (message.rfind(unknown, 0) == 0) {
      message = "unknown key '" + message.substr(unknown.size()) +
                "' (keys are fedgather-server's flags without the leading --)";
    }
    std::cerr << "fedgather-server: --config: " << message << std::endl;
    return 2;
  } catch (const CLI::ParseError& e) {
    // --help exits 0; every usage error exits 2.
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (check_config) {
    std::cout << app.config_to_str(/*default_also=*/true,
                                   /*write_description=*/false);
    return 0;
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
  if (insecure_plaintext) {
    if (!IsLoopbackListen(listen)) {
      std::cerr << "fedgather-server: --insecure-plaintext-for-benchmarks "
                   "needs a loopback --listen address (127.0.0.1:PORT, "
                   "[::1]:PORT or localhost:PORT), not "
                << listen << std::endl;
      return 2;
    }
    std::cerr << kPlaintextWarning << std::flush;
    options.tls.insecure_plaintext_for_benchmarks = true;
  }
  options.policy_path = policy;
  refusal_records.window = Seconds(refusal_window);
  refusal_records.burst_bytes = 4 * refusal_records.bytes_per_second;
  options.refusal_records = refusal_records;
  options.certificate_recheck_period = Seconds(cert_recheck);
  options.crl_path = crl;
  if (!audit_log.empty()) {
    absl::StatusOr<fedgather::server::AuditFsync> fsync =
        ParseFsync(audit_fsync);
    if (!fsync.ok()) {
      std::cerr << "fedgather-server: " << fsync.status().message()
                << std::endl;
      return 2;
    }
    options.audit.path = audit_log;
    options.audit.fsync = *fsync;
    options.audit.rotate_bytes = audit_rotate_mib << 20;
    options.audit.anchor_every = audit_anchor_every;
    options.audit_sign = !audit_unsigned;
  }
  if (absl::Status ciphers = fedgather::CheckCipherSuiteOverride(
          std::getenv("GRPC_SSL_CIPHER_SUITES"));
      !ciphers.ok()) {
    std::cerr << "fedgather-server: " << ciphers.message() << std::endl;
    return 2;
  }
  absl::StatusOr<fedgather::server::LogFormat> format =
      fedgather::server::ParseLogFormat(log_format);
  absl::StatusOr<LogLevel> level = fedgather::server::ParseLogLevel(log_level);
  if (!format.ok() || !level.ok()) {
    std::cerr << "fedgather-server: "
              << (format.ok() ? level.status() : format.status()).message()
              << std::endl;
    return 2;
  }
  EventLog events(&std::cerr, *format, *level);
  options.limits.round_timeout = Seconds(round_timeout);
  options.limits.join_timeout = Seconds(join_timeout);
  options.limits.heartbeat_interval = Seconds(heartbeat_interval);
  options.limits.heartbeat_timeout = Seconds(heartbeat_timeout);
  options.first_frame_timeout = Seconds(first_frame_timeout);
  options.connection_idle_timeout = Seconds(connection_idle_timeout);
  options.max_connections = max_connections;
  options.max_connections_per_address = max_connections_per_address;
  const rlim_t needed =
      static_cast<rlim_t>(max_connections) + kFilesBesidesConnections;
  if (const rlim_t files = RaiseFileLimit(needed); files < needed) {
    events.Log(
        LogLevel::kWarning,
        absl::StrCat("RLIMIT_NOFILE allows ", files,
                     " open files, fewer than --max-connections (",
                     max_connections, ") plus ", kFilesBesidesConnections,
                     " for the server's own: once the fds run out, "
                     "connections are refused (no_fds) below the cap; "
                     "raise the hard limit (ulimit -Hn)"));
  }
  options.limits.max_buffered_bytes_per_round = max_buffered_mib << 20;
  options.limits.resume_grace = Seconds(resume_grace);
  options.limits.resume_window_bytes = resume_window_mib << 20;
  if (!state_dir.empty()) {
    if (resume_grace <= 0) {
      std::cerr << "fedgather-server: --state-dir needs a positive "
                   "--resume-grace: members resume a restored round within "
                   "it"
                << std::endl;
      return 2;
    }
    if (absl::Status made = fedgather::MakeDirectories(state_dir, 0700);
        !made.ok()) {
      std::cerr << "fedgather-server: --state-dir: " << made.message()
                << std::endl;
      return 2;
    }
    options.limits.state_dir = state_dir;
  }
  options.limits.events = &events;
  options.metrics_listen = metrics_listen;

  // Block the stop and reload signals in every thread; the main thread
  // waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = fedgather::server::FedgatherServer::Start(std::move(options));
  if (!server.ok()) {
    events.Log(LogLevel::kError, server.status().message());
    return 1;
  }
  if (!port_file.empty()) {
    absl::Status written = fedgather::WriteStringToFile(
        port_file, absl::StrCat((*server)->port(), "\n"));
    if (!written.ok()) {
      events.Log(LogLevel::kError, written.message());
      return 1;
    }
  }
  events.Log(LogLevel::kInfo,
             absl::StrCat("listening on port ", (*server)->port(),
                          insecure_plaintext ? " (PLAINTEXT, no TLS)" : ""));
  if ((*server)->metrics_port() > 0) {
    events.Log(LogLevel::kInfo,
               absl::StrCat("metrics on port ", (*server)->metrics_port(),
                            " (/metrics)"));
  }
  int signal_number = 0;
  while (sigwait(&signals, &signal_number) == 0 && signal_number == SIGHUP) {
    absl::Status reloaded = (*server)->ReloadPolicy("SIGHUP");
    events.Log(reloaded.ok() ? LogLevel::kInfo : LogLevel::kWarning,
               absl::StrCat("SIGHUP: ", reloaded.ok() ? "policy reloaded"
                                                      : reloaded.message()));
  }
  events.Log(LogLevel::kInfo,
             absl::StrCat("signal ", signal_number, ", draining (up to ",
                          drain_timeout, " s)"));
  const fedgather::server::FedgatherServer::Drained drained =
      (*server)->Drain(Seconds(drain_timeout));
  std::string outcome;
  if (drained.rounds_failed > 0) {
    outcome = absl::StrCat("; aborted ", drained.rounds_failed,
                           " round(s) still in flight");
  } else if (drained.rounds_kept > 0) {
    outcome = absl::StrCat("; kept ", drained.rounds_kept,
                           " round(s) still in flight in --state-dir, for "
                           "members to resume after the restart");
  }
  events.Log(drained.rounds_failed > 0 ? LogLevel::kWarning : LogLevel::kInfo,
             absl::StrCat("drained", outcome, ", stopping"));
  absl::Status closed = (*server)->Shutdown(absl::Seconds(2));
  if (!closed.ok()) {
    events.Log(LogLevel::kError, absl::StrCat("audit log: ", closed.message()));
    return 1;
  }
  return 0;
}
