// Test helpers that run programs (the built fedgather and fedgather-server)
// as real processes with posix_spawn.
#ifndef FEDGATHER_TESTS_COMMON_SUBPROCESS_H_
#define FEDGATHER_TESTS_COMMON_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace fedgather::testing {

// SpawnProcess starts argv[0] with `argv`; returns its pid (0, and a test
// failure, when it cannot start). Non-empty paths receive its stdout and
// stderr: truncated, or appended to with `append`. The child leads a process
// group of its own: a test that stops it (SIGSTOP) must not see the kernel
// hang it up, as it does to the stopped members of a group that is orphaned
// (the test's own group is, when the shell that started ctest has exited).
pid_t SpawnProcess(std::vector<std::string> argv,
                   const std::string& stdout_path = "",
                   const std::string& stderr_path = "", bool append = false);

// WaitProcess reaps `pid`; returns its exit code, or 128 + the signal that
// ended it.
int WaitProcess(pid_t pid);

// WaitProcessFor reaps `pid` if it exits within `timeout`: returns
// WaitProcess's code, or -1 when it is still running (it is left running).
int WaitProcessFor(pid_t pid, absl::Duration timeout);

// RunProcess runs `argv` to completion; returns WaitProcess's code and puts
// its stdout and stderr in *out and *err.
int RunProcess(std::vector<std::string> argv, std::string* out,
               std::string* err);

}  // namespace fedgather::testing

#endif  // FEDGATHER_TESTS_COMMON_SUBPROCESS_H_
