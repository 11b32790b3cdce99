// FaultCluster: a real fedgather-server process and participants that are
// real `fedgather join` processes, over mutual TLS on 127.0.0.1, for fault
// injection (issue 9). The server keeps a signed audit log, a state
// directory and a JSON event log, with short liveness bounds (kHeartbeat*,
// kResumeGrace) so that faults show within seconds. Participants contribute
// pseudo-random bytes with `--op all_gather_bytes`, so each may send a
// different amount; site i (site-1, site-2, ...) holds rank i - 1 (ranks
// follow sorted identities).
#ifndef FEDGATHER_TESTS_FAULTS_FAULT_CLUSTER_H_
#define FEDGATHER_TESTS_FAULTS_FAULT_CLUSTER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "fedgather/v1/fedgather.grpc.pb.h"
#include "tests/e2e/server_process.h"
#include "tests/e2e/test_cluster.h"

namespace fedgather::testing {

// The server's liveness bounds in every fault test.
inline constexpr absl::Duration kHeartbeatInterval = absl::Milliseconds(200);
inline constexpr absl::Duration kHeartbeatTimeout = absl::Seconds(3);
inline constexpr absl::Duration kResumeGrace = absl::Seconds(5);
inline constexpr absl::Duration kFirstFrameTimeout = absl::Seconds(2);

// Where the server runs: `launcher` is put before its command (e.g. "ip
// netns exec NS"), and it listens on `host`.
struct ServerPlacement {
  std::vector<std::string> launcher;
  std::string host = "127.0.0.1";
};

// One `fedgather join` process.
struct Participant {
  int site = 0;  // rank too
  pid_t pid = 0;
  std::string bytes;               // what it contributes
  std::string input, output, log;  // log: its stdout and stderr
  int exit_code = -1;              // set by FaultCluster::Exit
};

class FaultCluster {
 public:
  // Provisions `world` participants and starts the server with the flags
  // above plus `server_flags` (which replace a default flag they repeat).
  // `options` may change the cluster (the policy, server names);
  // in_process_server and audit are set here.
  explicit FaultCluster(int world, std::vector<std::string> server_flags = {},
                        ClusterOptions options = {},
                        ServerPlacement placement = {});
  ~FaultCluster();  // kills the participants still running

  TestCluster& cluster() { return cluster_; }
  ServerProcess& server() { return server_; }
  int world() const { return world_; }

  // Join starts `site`'s participant with `size` bytes made from `seed`.
  // `server` overrides the address it connects to; `launcher` is put
  // before the command (e.g. "ip netns exec NS"); `flags` go after the
  // join's own (e.g. --peer-listen).
  Participant& Join(int site, size_t size, uint32_t seed,
                    const std::string& server = "",
                    const std::vector<std::string>& launcher = {},
                    const std::vector<std::string>& flags = {});
  // Exit waits up to `bound` for `p` to exit and returns its exit status
  // (128 + signal when a signal ended it). A participant still running
  // after `bound` hangs: it is killed, the test fails, and -1 is returned.
  int Exit(Participant& p, absl::Duration bound);
  // Log is what `p` printed.
  std::string Log(const Participant& p) const;
  // ExpectGathered expects `p`'s output to hold, at each rank, the bytes of
  // the participant of that site in `all`, and the rank's identity; true
  // when it does.
  bool ExpectGathered(const Participant& p,
                      const std::vector<const Participant*>& all) const;

  // StubFor is a Rendezvous stub on a channel of its own that presents
  // `name`'s certificate, for tests that speak the protocol by hand.
  std::unique_ptr<v1::Rendezvous::Stub> StubFor(const std::string& name);

  // ServerEvents parses the server's JSON log lines (the ones that are
  // events).
  std::vector<nlohmann::json> ServerEvents() const;
  // WaitForEvent polls the server log until an event named `name` whose
  // fields include those of `match` appears; returns it, or nullopt after
  // `timeout`.
  std::optional<nlohmann::json> WaitForEvent(const std::string& name,
                                             const nlohmann::json& match,
                                             absl::Duration timeout) const;
  // CountEvents counts the events named `name` whose fields include `match`.
  int CountEvents(const std::string& name, const nlohmann::json& match) const;
  // DataPlaneChosen is the plane the server's first data_plane_chosen event
  // named ("" before it chose).
  std::string DataPlaneChosen() const;

  // ExpectNextRoundWorks runs a fresh round of every site with a few KiB
  // each and expects every output byte for byte; true when all of it held.
  // May run on a thread of its own while the test attacks the server, as
  // long as nothing else calls Join meanwhile.
  bool ExpectNextRoundWorks(uint32_t seed);
  // StopAndVerifyAudit stops the server with SIGTERM (it must exit 0) and
  // expects `fedgather audit verify --cert` to pass on its audit log.
  void StopAndVerifyAudit();

 private:
  const int world_;
  TestCluster cluster_;
  ServerProcess server_;
  std::vector<std::unique_ptr<Participant>> participants_;
};

// Since returns the time since `start` in seconds, for the fault reports.
double SecondsSince(absl::Time start);

// JoinErrorLine is the line `fedgather join` prints for a failed op
// ("fedgather join: CODE: ..."), or "" when `log` has none.
std::string JoinErrorLine(const std::string& log);

// ReportFault prints "FAULT <fault>: bound B, observed O s", the line the
// fault matrix in docs/testing.md is made from.
void ReportFault(const std::string& fault, absl::Duration bound,
                 double observed);

}  // namespace fedgather::testing

#endif  // FEDGATHER_TESTS_FAULTS_FAULT_CLUSTER_H_
