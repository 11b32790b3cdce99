#include "tests/e2e/server_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/file_io.h"
#include "tests/common/subprocess.h"

namespace fedgather::testing {

ServerProcess::ServerProcess(const TestCluster& cluster,
                             std::vector<std::string> extra,
                             std::vector<std::string> launcher,
                             std::string host)
    : dir_(cluster.dir()),
      policy_(cluster.policy_path()),
      extra_(std::move(extra)),
      launcher_(std::move(launcher)),
      host_(std::move(host)) {}

ServerProcess::~ServerProcess() { Kill(); }

void ServerProcess::Start(int port) {
  const std::string port_file = dir_ + "/port";
  ::unlink(port_file.c_str());
  const std::vector<std::string> command = {FEDGATHER_SERVER_PATH,
                                            "--listen",
                                            absl::StrCat(host_, ":", port),
                                            "--port-file",
                                            port_file,
                                            "--cert",
                                            dir_ + "/server/cert.pem",
                                            "--key",
                                            dir_ + "/server/key.pem",
                                            "--client-ca",
                                            dir_ + "/ca.pem",
                                            "--policy",
                                            policy_};
  std::vector<std::string> args = launcher_;
  args.insert(args.end(), command.begin(), command.end());
  args.insert(args.end(), extra_.begin(), extra_.end());
  pid_ = SpawnProcess(std::move(args), "", log_path(), /*append=*/true);
  ASSERT_GT(pid_, 0);
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline) {
    absl::StatusOr<std::string> written = ReadFileToString(port_file);
    if (written.ok() &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(*written), &port_)) {
      return;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  FAIL() << "the server did not start: " << Log();
}

void ServerProcess::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  WaitProcess(pid_);
  pid_ = 0;
}

int ServerProcess::Stop(absl::Duration timeout) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = 0;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  Kill();
  return -1;
}

int RunServerBinary(const std::vector<std::string>& args, std::string* out,
                    std::string* err) {
  std::vector<std::string> argv = {FEDGATHER_SERVER_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(std::move(argv), out, err);
}

std::string ServerProcess::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

std::string ServerProcess::Log() const {
  return ReadFileToString(log_path()).value_or("");
}

}  // namespace fedgather::testing
