#include "tests/e2e/server_process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/file_io.h"

extern char** environ;

namespace fedgather::testing {

ServerProcess::ServerProcess(const TestCluster& cluster,
                             std::vector<std::string> extra)
    : dir_(cluster.dir()),
      policy_(cluster.policy_path()),
      extra_(std::move(extra)) {}

ServerProcess::~ServerProcess() { Kill(); }

void ServerProcess::Start(int port) {
  const std::string port_file = dir_ + "/port";
  ::unlink(port_file.c_str());
  std::vector<std::string> args = {FEDGATHER_SERVER_PATH,
                                   "--listen",
                                   absl::StrCat("127.0.0.1:", port),
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
  args.insert(args.end(), extra_.begin(), extra_.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, log_path().c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  ASSERT_EQ(
      posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
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
  int status = 0;
  ::waitpid(pid_, &status, 0);
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
  char dir[] = "/tmp/fedgather-run-XXXXXX";
  EXPECT_NE(::mkdtemp(dir), nullptr);
  const std::string out_path = std::string(dir) + "/out";
  const std::string err_path = std::string(dir) + "/err";
  std::vector<std::string> argv_strings = {FEDGATHER_SERVER_PATH};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const int spawned =
      posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  if (spawned != 0 || ::waitpid(pid, &status, 0) != pid) return -1;
  *out = ReadFileToString(out_path).value_or("");
  *err = ReadFileToString(err_path).value_or("");
  ::unlink(out_path.c_str());
  ::unlink(err_path.c_str());
  ::rmdir(dir);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string ServerProcess::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

std::string ServerProcess::Log() const {
  return ReadFileToString(log_path()).value_or("");
}

}  // namespace fedgather::testing
