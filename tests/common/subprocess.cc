#include "tests/common/subprocess.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <utility>

#include "absl/time/clock.h"
#include "common/file_io.h"

extern char** environ;

namespace fedgather::testing {

pid_t SpawnProcess(std::vector<std::string> argv,
                   const std::string& stdout_path,
                   const std::string& stderr_path, bool append) {
  std::vector<char*> pointers;
  for (std::string& a : argv) pointers.push_back(a.data());
  pointers.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const int flags = O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC);
  for (const auto& [fd, path] :
       {std::make_pair(1, &stdout_path), std::make_pair(2, &stderr_path)}) {
    if (path->empty()) continue;
    posix_spawn_file_actions_addopen(&actions, fd, path->c_str(), flags, 0644);
  }
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  pid_t pid = 0;
  EXPECT_EQ(posix_spawn(&pid, pointers[0], &actions, &attributes,
                        pointers.data(), environ),
            0)
      << argv[0];
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

int WaitProcess(pid_t pid) {
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int WaitProcessFor(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    EXPECT_GE(done, 0) << "waitpid " << pid;
    if (done == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (done < 0 || absl::Now() >= deadline) return -1;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

int RunProcess(std::vector<std::string> argv, std::string* out,
               std::string* err) {
  std::string dir = ::testing::TempDir() + "fedgather-run-XXXXXX";
  EXPECT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string out_path = dir + "/out";
  const std::string err_path = dir + "/err";
  const int code =
      WaitProcess(SpawnProcess(std::move(argv), out_path, err_path));
  *out = ReadFileToString(out_path).value_or("");
  *err = ReadFileToString(err_path).value_or("");
  ::unlink(out_path.c_str());
  ::unlink(err_path.c_str());
  ::rmdir(dir.c_str());
  return code;
}

}  // namespace fedgather::testing
