// ServerProcess: a real fedgather-server process for a TestCluster made with
// in_process_server = false (its certificates and policy), started, stopped
// and killed by the test. Every start appends to one stderr log.
#ifndef FEDGATHER_TESTS_E2E_SERVER_PROCESS_H_
#define FEDGATHER_TESTS_E2E_SERVER_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "tests/e2e/test_cluster.h"

namespace fedgather::testing {

class ServerProcess {
 public:
  // `extra` flags are added to every start. `launcher` is put before the
  // command (e.g. "ip netns exec NS"); the server listens on `host`.
  ServerProcess(const TestCluster& cluster, std::vector<std::string> extra,
                std::vector<std::string> launcher = {},
                std::string host = "127.0.0.1");
  ~ServerProcess();  // kills it if it runs

  // Start runs the server on host:`port` (0: any) and waits until it
  // listens; fails the test if it does not within 60 s.
  void Start(int port);
  // Kill sends SIGKILL and reaps it.
  void Kill();
  // Stop sends SIGTERM and returns its exit status (128 + signal when a
  // signal ended it), or -1 when it did not exit within `timeout` (then it
  // is killed).
  int Stop(absl::Duration timeout);

  std::string address() const;
  int port() const { return port_; }
  // The running server's process id (for /proc sampling); 0 when stopped.
  pid_t pid() const { return pid_; }
  std::string log_path() const { return dir_ + "/server.log"; }
  std::string Log() const;

 private:
  const std::string dir_;
  const std::string policy_;
  const std::vector<std::string> extra_;
  const std::vector<std::string> launcher_;
  const std::string host_;
  pid_t pid_ = 0;
  int port_ = 0;
};

// RunServerBinary runs fedgather-server with `args` to completion and
// returns its exit status; its stdout and stderr go to *out and *err.
int RunServerBinary(const std::vector<std::string>& args, std::string* out,
                    std::string* err);

}  // namespace fedgather::testing

#endif  // FEDGATHER_TESTS_E2E_SERVER_PROCESS_H_
