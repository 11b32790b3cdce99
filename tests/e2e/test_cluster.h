// TestCluster: a real fedgather-server in this process over mutual TLS on
// 127.0.0.1:0, with certificates made by the project's own provisioning code
// in a fresh temporary directory, an access policy file (and optionally a
// CRL and an audit log) there, and helpers that run one thread per rank.
#ifndef FEDGATHER_TESTS_E2E_TEST_CLUSTER_H_
#define FEDGATHER_TESTS_E2E_TEST_CLUSTER_H_

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "common/tensor_spec.h"
#include "common/tls_credentials.h"
#include "server/events/event_sink.h"
#include "server/fedgather_server.h"
#include "tests/server/events/recording_events.h"

namespace fedgather::testing {

struct ClusterOptions {
  ClusterOptions(int n = 2) : participants(n) {}  // NOLINT: implicit on purpose
  int participants;                    // site-1..site-N, all in group "demo"
  std::vector<std::string> extra;      // provisioned but not in any group
  std::vector<std::string> observers;  // observers of "demo"
  std::vector<std::string> admins;     // admins of "demo" and server admins
  // Extra YAML appended to the policy's top level (e.g. "limits: {...}\n").
  std::string policy_extra;
  // Extra keys of group "demo", indented by 4 (e.g. "    min_quorum: 2\n").
  std::string group_extra;
  // More groups, as YAML list items under "groups:" (indented by 2), e.g.
  // for identities in `extra`.
  std::string more_groups;
  bool audit = false;  // a signed audit log at dir()/audit.jsonl
  // The audit log's file calls and retry period (AuditLogOptions).
  server::AuditFileCalls audit_file;
  absl::Duration audit_retry_period = absl::Seconds(1);
  bool crl = false;            // --crl dir()/crl.pem, which starts empty
  server::GroupLimits limits;  // events are set by the cluster
  absl::Duration certificate_recheck_period = absl::Seconds(30);
  // False: provision and write the policy only; the test runs a
  // fedgather-server process itself (address() and server() are unusable).
  bool in_process_server = true;
  bool metrics = false;  // serve /metrics on 127.0.0.1:0
  // DNS names and IPs the server certificate names.
  std::vector<std::string> server_names = {"localhost", "127.0.0.1"};
};

class TestCluster {
 public:
  // Provisions certificates, writes the policy, starts the server. Fails
  // the test on error.
  explicit TestCluster(const ClusterOptions& options);
  ~TestCluster();

  const std::string& dir() const { return dir_; }
  std::string address() const;
  int participants() const { return options_.participants; }
  static std::string Site(int i) { return "site-" + std::to_string(i + 1); }
  RecordingEvents& events() { return events_; }
  server::FedgatherServer& server() { return *server_; }

  // DefaultPolicy is the policy the cluster starts with.
  std::string DefaultPolicy() const;
  std::string policy_path() const { return dir_ + "/policy.yaml"; }
  std::string audit_path() const { return dir_ + "/audit.jsonl"; }
  // Revoke adds `names`' certificates to dir()/crl.pem (options.crl must be
  // set); the server honours it after a reload.
  void Revoke(const std::vector<std::string>& names);
  // StopServer shuts the server down, which closes the audit log.
  void StopServer();

  // TlsFor reads DIR/<name>/{cert,key,ca}.pem.
  TlsFiles TlsFor(const std::string& name) const;
  std::unique_ptr<Client> Connect(const std::string& name) const;
  // ConnectVia connects through `address` (a proxy to the server).
  std::unique_ptr<Client> ConnectVia(const std::string& name,
                                     const std::string& address) const;

 private:
  ClusterOptions options_;
  std::string dir_;
  RecordingEvents events_;
  std::unique_ptr<server::FedgatherServer> server_;
};

// MustJoin joins group "demo" of `cluster` at `rank`; fails the test on error.
std::unique_ptr<Group> MustJoin(const TestCluster& cluster, Client& client,
                                int rank);

// GatherRanks gathers one int32 (7000 + rank) from every rank of `group` and
// checks every value.
absl::Status GatherRanks(Group& group);

// OfferingMembers: site-1..site-N joined to "demo" at ranks 0..N-1 through
// `address` (the server's, or a proxy's in front of it), each offering a
// peer endpoint on 127.0.0.1 at a free port unless `adjust` changes its
// JoinOptions. A join that fails fails the test and leaves that group null.
struct OfferingMembers {
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::unique_ptr<Group>> groups;

  OfferingMembers(const TestCluster& cluster, const std::string& address,
                  const std::function<void(int, JoinOptions&)>& adjust = {});
  // Runs `fn(rank)` on every member's thread; returns each status.
  std::vector<absl::Status> Run(const std::function<absl::Status(int)>& fn);
};

// Members of a formed group, one client each, joined at rank i.
struct Members {
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::unique_ptr<Group>> groups;

  explicit Members(const TestCluster& cluster);
  // Runs `fn(rank)` on every member's thread; returns each status.
  std::vector<absl::Status> Run(const std::function<absl::Status(int)>& fn);
  // Runs GatherRanks on every member and expects it to pass.
  void ExpectNextRoundWorks();
};

// ExpectSameStatusEverywhere expects every status to be `code` and equal.
void ExpectSameStatusEverywhere(const std::vector<absl::Status>& statuses,
                                absl::StatusCode code);

// ReadAuditRecords parses every line of the audit file at `path`.
std::vector<nlohmann::json> ReadAuditRecords(const std::string& path);

// RunEveryRank runs fn(i) for i in [0, n) on n threads and returns each
// status.
std::vector<absl::Status> RunEveryRank(
    int n, const std::function<absl::Status(int)>& fn);

// RunRanks runs fn(i) for i in [0, n) on n threads and joins them.
void RunRanks(int n, const std::function<void(int)>& fn);

// RandomBytes returns `size` deterministic pseudo-random bytes for `seed`.
std::vector<uint8_t> RandomBytes(size_t size, uint32_t seed);

}  // namespace fedgather::testing

#endif  // FEDGATHER_TESTS_E2E_TEST_CLUSTER_H_
