// allgather_bench: fedgather's all_gather and all_reduce end to end, as real
// processes, measured the way ../shared/bench/peers/README.md measures Gloo
// and MPI, so its lines join that run:
//
//   allgather_bench --np 4 --sizes 4096,1048576 [--ops all_gather,all_reduce]
//                   [--insecure] [--impl-name NAME]
//                   [--data-plane relay|direct|auto]
//                   [--server-host H --rank-hosts H0,H1,..
//                    --server-wrap CMD --rank-wrap CMD]   (bench/net)
//
// It provisions a CA, server and participant certificates (client/provision.h)
// into a temporary directory, starts `fedgather-server` on 127.0.0.1:0 over
// mutual TLS (with --insecure: `--insecure-plaintext-for-benchmarks`), and
// re-executes itself N times as the participants (hidden --participant
// mode), one process per rank. Every rank joins group "bench"; then for every
// size S (bytes per rank, float32) and op in turn:
//   * warm-up: 3 iterations, or 1 if the first took more than --long-op-s on
//     some rank; the first one's output is checked on every rank;
//   * iters = clamp(ceil(--target-s / t_warm), --min-iters, --max-iters),
//     where t_warm is the max over ranks of the median warm-up time;
//   * `iters` back-to-back iterations, each timed on every rank.
// An iteration's time is the max over ranks. The ranks agree on these
// maxima through fedgather itself (ALL_REDUCE MAX over F64), as the Gloo
// benchmark does through gloo. all_gather is AllGatherInto into a
// preallocated [N, S/4] tensor; all_reduce is AllReduce MEAN into a
// preallocated tensor (the peers reduce with SUM; MEAN also divides).
//
// Output (stdout): one CSV line per (S, op), the peers' columns
//   impl,op,N,bytes_per_rank,median_s,algbw_GBps,busbw_GBps,min_s,p90_s,mean_s,iters
// with all_gather algbw = S*N/t, busbw = algbw*(N-1)/N and all_reduce
// algbw = S/t, busbw = algbw*2(N-1)/N (nccl-tests; GB/s = 1e9 B/s), each
// followed by a comment line
//   #server_stats impl=.. op=.. N=.. bytes_per_rank=.. iters=..
//       server_cpu_s_per_op=.. server_cpu_busy=.. server_peak_rss_bytes=..
//       rank0_cpu_s_per_op=..
// The placement flags put the processes on an emulated network
// (bench/net/run.sh): the server listens on --server-host (default
// 127.0.0.1), rank r offers its peer endpoint on the r-th --rank-hosts
// address (default 127.0.0.1), and the server and rank r are started
// through the command prefixes --server-wrap and --rank-wrap (split at
// spaces; "{rank}" becomes r), e.g. --rank-wrap "ip netns exec net-{rank}".
// A prefix must exec the command, so that the pid started is the process
// measured.
//
// where the server's CPU time (/proc/PID/stat) is taken over rank 0's timed
// iterations, server_cpu_busy is that CPU time over their wall time, and the
// peak RSS (VmHWM) is reset before each (S, op)'s warm-up. Failures print a
// line starting with #ERROR and exit 1. Progress and errors go to stderr.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/process_stats.h"
#include "client/client.h"
#include "client/provision.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "common/tensor_spec.h"
#include "common/tls_credentials.h"

extern char** environ;

namespace fedgather::bench {
namespace {

constexpr char kGroup[] = "bench";

// What the controller and every participant share.
struct Method {
  int np = 4;
  std::string sizes = "4096,1048576,16777216,67108864";
  std::string ops = "all_gather,all_reduce";
  std::string impl_name;  // default: fedgather_{tls,plain}[_direct]
  bool insecure = false;
  // relay: no member offers a peer endpoint; direct: every member offers
  // one on 127.0.0.1 and the run fails unless the epoch is direct; auto:
  // they offer one and the server chooses (docs/protocol.md, "Data
  // planes"). The peer links use TLS even with --insecure.
  std::string data_plane = "relay";
  int warmup = 3;
  double target_s = 0.5;
  double long_op_s = 0.2;
  int min_iters = 5;
  int max_iters = 10000;
  double timeout_s = 900;  // the whole run; also each collective's bound
  // all_gather outputs of every rank in one shared tmpfs file per (S, op):
  // every rank writes the same gathered bytes there, so a large N*S fits in
  // memory; the server and the wire are unchanged.
  bool shared_output = false;
};

// Where the processes run (the placement flags above).
struct Placement {
  std::string server_host = "127.0.0.1";
  std::vector<std::string> rank_hosts;  // empty: 127.0.0.1 for every rank
  std::string server_wrap;
  std::string rank_wrap;

  std::string RankHost(int rank) const {
    return rank_hosts.empty() ? "127.0.0.1" : rank_hosts[rank];
  }
};

// The participant's own flags (hidden).
struct ParticipantFlags {
  int rank = -1;
  std::string address;
  std::string peer_host;  // where it offers its peer endpoint
  std::string tls_dir;
  std::string shared_dir;
  pid_t server_pid = 0;
  int done_fd = -1;     // write "done" here after the last collective
  int release_fd = -1;  // then leave the group when this reaches EOF
};

std::string Site(int i) { return absl::StrCat("site-", i + 1); }

absl::StatusOr<std::vector<int64_t>> ParseSizes(const std::string& text) {
  std::vector<int64_t> sizes;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t size = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &size) ||
        size <= 0 || size % 4 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--sizes: '", part, "' is not a positive multiple of 4 (float32)"));
    }
    sizes.push_back(size);
  }
  if (sizes.empty()) return absl::InvalidArgumentError("--sizes is empty");
  return sizes;
}

absl::StatusOr<std::vector<std::string>> ParseOps(const std::string& text) {
  std::vector<std::string> ops =
      absl::StrSplit(text, ',', absl::SkipWhitespace());
  for (const std::string& op : ops) {
    if (op != "all_gather" && op != "all_reduce") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--ops: '", op, "' is neither all_gather nor all_reduce"));
    }
  }
  if (ops.empty()) return absl::InvalidArgumentError("--ops is empty");
  return ops;
}

// Quantile of sorted `v` with linear interpolation (numpy's default, as the
// peers compute it).
double Quantile(const std::vector<double>& v, double q) {
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = static_cast<size_t>(std::ceil(pos));
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

double SelfCpuSeconds() {
  struct rusage usage;
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// ---------------------------------------------------------------------------
// Participant

// SharedMapping is a MAP_SHARED file mapping, unmapped on destruction.
class SharedMapping {
 public:
  static absl::StatusOr<std::unique_ptr<SharedMapping>> Open(
      const std::string& path, size_t size) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return ErrnoToStatus(errno, path);
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
      const int error = errno;
      ::close(fd);
      return ErrnoToStatus(error, path);
    }
    void* data =
        ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int error = errno;
    ::close(fd);
    if (data == MAP_FAILED) return ErrnoToStatus(error, path);
    return std::unique_ptr<SharedMapping>(new SharedMapping(data, size));
  }
  ~SharedMapping() { ::munmap(data_, size_); }
  void* data() const { return data_; }

 private:
  SharedMapping(void* data, size_t size) : data_(data), size_(size) {}
  void* data_;
  size_t size_;
};

class Participant {
 public:
  Participant(const Method& method, const ParticipantFlags& flags)
      : method_(method), flags_(flags) {
    collective_.timeout = absl::Seconds(method.timeout_s);
  }

  // Run joins the group and measures every (S, op); rank 0 prints the
  // results. Then it signals done and waits for the controller's release
  // before leaving, so that no rank ends the epoch while another is still
  // receiving.
  absl::Status Run() {
    FG_ASSIGN_OR_RETURN(const std::vector<int64_t> sizes,
                        ParseSizes(method_.sizes));
    FG_ASSIGN_OR_RETURN(const std::vector<std::string> ops,
                        ParseOps(method_.ops));
    ClientOptions options;
    options.server_address = flags_.address;
    FG_ASSIGN_OR_RETURN(options.tls, ReadTlsDir(flags_.tls_dir));
    options.tls.insecure_plaintext_for_benchmarks = method_.insecure;
    FG_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                        Client::Connect(options));
    JoinOptions join;
    join.group = kGroup;
    join.world_size = method_.np;
    join.rank = flags_.rank;
    join.timeout = absl::Seconds(method_.timeout_s);
    if (method_.data_plane != "relay") {
      join.peer_listen = absl::StrCat(flags_.peer_host, ":0");
    }
    FG_ASSIGN_OR_RETURN(group_, client->Join(join));
    if (method_.data_plane == "direct" &&
        group_->data_plane() != v1::DATA_PLANE_DIRECT) {
      return absl::FailedPreconditionError(
          absl::StrCat("--data-plane direct, but the epoch runs on the relay: ",
                       group_->data_plane_reason()));
    }
    for (int64_t size : sizes) {
      for (const std::string& op : ops) {
        FG_RETURN_IF_ERROR(Measure(op, size));
      }
    }
    if (::write(flags_.done_fd, "done\n", 5) != 5) {
      return ErrnoToStatus(errno, "writing to the controller");
    }
    char byte;
    while (::read(flags_.release_fd, &byte, 1) > 0) {
    }
    group_.reset();
    return absl::OkStatus();
  }

 private:
  // MaxOverRanks replaces `values` by their element-wise max over ranks.
  absl::Status MaxOverRanks(std::vector<double>& values) {
    const TensorSpec spec{
        "t", DType::kF64, {static_cast<int64_t>(values.size())}};
    std::vector<double> max(values.size());
    const ConstHostTensor in{spec, values.data()};
    const MutableHostTensor out{spec, max.data()};
    FG_RETURN_IF_ERROR(
        group_->AllReduce({&in, 1}, {&out, 1}, v1::MAX, 1, collective_));
    values = std::move(max);
    return absl::OkStatus();
  }

  absl::Status Measure(const std::string& op, int64_t size) {
    const int n = method_.np;
    const int rank = flags_.rank;
    const bool gather = op == "all_gather";
    const int64_t count = size / 4;
    std::vector<float> input(count, static_cast<float>(rank + 1));
    const TensorSpec in_spec{"x", DType::kF32, {count}};
    const ConstHostTensor in{in_spec, input.data()};

    // Outputs are written once (zero) before the first op, so their pages
    // are faulted in before timing, as the peers' are.
    const size_t out_count = gather ? count * n : count;
    std::vector<float> private_out;
    std::unique_ptr<SharedMapping> shared_out;
    float* out_data = nullptr;
    if (gather && method_.shared_output) {
      FG_ASSIGN_OR_RETURN(
          shared_out, SharedMapping::Open(
                          absl::StrCat(flags_.shared_dir, "/all_gather-", size),
                          out_count * sizeof(float)));
      out_data = static_cast<float*>(shared_out->data());
      std::memset(out_data, 0, out_count * sizeof(float));
    } else {
      private_out.assign(out_count, 0.0f);
      out_data = private_out.data();
    }
    TensorSpec out_spec = in_spec;
    if (gather) out_spec.shape.insert(out_spec.shape.begin(), n);
    const MutableHostTensor out{out_spec, out_data};

    auto run_once = [&]() -> absl::Status {
      if (gather)
        return group_->AllGatherInto({&in, 1}, {&out, 1}, collective_);
      return group_->AllReduce({&in, 1}, {&out, 1}, v1::MEAN, 1, collective_);
    };
    auto check = [&]() -> absl::Status {
      if (gather) {
        for (int r = 0; r < n; ++r) {
          const float want = static_cast<float>(r + 1);
          const float* part = out_data + static_cast<size_t>(r) * count;
          if (std::any_of(part, part + count,
                          [&](float v) { return v != want; })) {
            return absl::DataLossError(absl::StrCat(
                "rank ", rank, ": all_gather of ", size,
                " B/rank: the part of rank ", r, " is not all ", want));
          }
        }
        return absl::OkStatus();
      }
      const float want = static_cast<float>(n + 1) / 2;
      if (std::any_of(out_data, out_data + count,
                      [&](float v) { return v != want; })) {
        return absl::DataLossError(absl::StrCat("rank ", rank,
                                                ": all_reduce MEAN of ", size,
                                                " B/rank is not all ", want));
      }
      return absl::OkStatus();
    };
    using Clock = std::chrono::steady_clock;
    auto seconds = [](Clock::duration d) {
      return std::chrono::duration<double>(d).count();
    };

    const bool stats = rank == 0 && flags_.server_pid > 0;
    if (stats) (void)ResetPeakRss(flags_.server_pid);

    // Warm-up; the first is checked, and decides how many follow.
    std::vector<double> warm;
    int warmups = std::max(1, method_.warmup);
    for (int i = 0; i < warmups; ++i) {
      const Clock::time_point start = Clock::now();
      FG_RETURN_IF_ERROR(run_once());
      warm.push_back(seconds(Clock::now() - start));
      if (i == 0) {
        FG_RETURN_IF_ERROR(check());
        std::vector<double> first = {warm[0]};
        FG_RETURN_IF_ERROR(MaxOverRanks(first));
        if (first[0] > method_.long_op_s) warmups = 1;
      }
    }
    std::sort(warm.begin(), warm.end());
    std::vector<double> t_warm = {Quantile(warm, 0.5)};
    FG_RETURN_IF_ERROR(MaxOverRanks(t_warm));
    const int iters = static_cast<int>(std::clamp<double>(
        std::ceil(method_.target_s / std::max(t_warm[0], 1e-9)),
        method_.min_iters, method_.max_iters));

    std::vector<double> times(iters);
    const double server_cpu0 =
        stats ? CpuSeconds(flags_.server_pid).value_or(NAN) : NAN;
    const double self_cpu0 = SelfCpuSeconds();
    const Clock::time_point loop_start = Clock::now();
    for (int i = 0; i < iters; ++i) {
      const Clock::time_point start = Clock::now();
      FG_RETURN_IF_ERROR(run_once());
      times[i] = seconds(Clock::now() - start);
    }
    const double loop_s = seconds(Clock::now() - loop_start);
    const double self_cpu = SelfCpuSeconds() - self_cpu0;
    const double server_cpu =
        stats ? CpuSeconds(flags_.server_pid).value_or(NAN) - server_cpu0 : NAN;
    const int64_t peak_rss =
        stats ? PeakRssBytes(flags_.server_pid).value_or(-1) : -1;

    FG_RETURN_IF_ERROR(MaxOverRanks(times));
    if (rank != 0) return absl::OkStatus();
    const double sum = std::accumulate(times.begin(), times.end(), 0.0);
    std::sort(times.begin(), times.end());
    const double median = Quantile(times, 0.5);
    const double algbw =
        static_cast<double>(size) * (gather ? n : 1) / median / 1e9;
    const double busf =
        gather ? static_cast<double>(n - 1) / n : 2.0 * (n - 1) / n;
    const std::string& impl = method_.impl_name;
    std::printf("%s,%s,%d,%lld,%.9f,%.6f,%.6f,%.9f,%.9f,%.9f,%d\n",
                impl.c_str(), op.c_str(), n, static_cast<long long>(size),
                median, algbw, algbw * busf, times.front(),
                Quantile(times, 0.9), sum / iters, iters);
    std::printf(
        "#server_stats impl=%s op=%s N=%d bytes_per_rank=%lld iters=%d "
        "server_cpu_s_per_op=%.6f server_cpu_busy=%.3f "
        "server_peak_rss_bytes=%lld rank0_cpu_s_per_op=%.6f\n",
        impl.c_str(), op.c_str(), n, static_cast<long long>(size), iters,
        server_cpu / iters, server_cpu / loop_s,
        static_cast<long long>(peak_rss), self_cpu / iters);
    std::fflush(stdout);
    return absl::OkStatus();
  }

  const Method method_;
  const ParticipantFlags flags_;
  CollectiveOptions collective_;
  std::unique_ptr<Group> group_;
};

// ---------------------------------------------------------------------------
// Controller

// Spawn starts `args` with `fds` = {(fd in the child, fd here)} and the
// child's stdout and stderr sent to `out_path` / `err_path` when not empty.
absl::StatusOr<pid_t> Spawn(std::vector<std::string> args,
                            const std::vector<std::pair<int, int>>& fds,
                            const std::string& out_path,
                            const std::string& err_path) {
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (const auto& [child_fd, fd] : fds) {
    posix_spawn_file_actions_adddup2(&actions, fd, child_fd);
  }
  if (!out_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
  }
  if (!err_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
  }
  pid_t pid = 0;
  const int error =
      ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0)
    return ErrnoToStatus(error, absl::StrCat("starting ", args[0]));
  return pid;
}

// Wrapped puts the command prefix `wrap` (split at spaces, "{rank}"
// replaced by `rank`) before `args`.
std::vector<std::string> Wrapped(const std::string& wrap, int rank,
                                 std::vector<std::string> args) {
  std::vector<std::string> prefix;
  for (absl::string_view word : absl::StrSplit(wrap, ' ', absl::SkipEmpty())) {
    prefix.push_back(
        absl::StrReplaceAll(word, {{"{rank}", absl::StrCat(rank)}}));
  }
  args.insert(args.begin(), prefix.begin(), prefix.end());
  return args;
}

// A pipe whose ends are above the fds a child gets (3 and 4), close-on-exec.
absl::StatusOr<std::pair<int, int>> HighPipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe2");
  std::pair<int, int> high;
  high.first = ::fcntl(fds[0], F_DUPFD_CLOEXEC, 10);
  high.second = ::fcntl(fds[1], F_DUPFD_CLOEXEC, 10);
  ::close(fds[0]);
  ::close(fds[1]);
  if (high.first < 0 || high.second < 0) return ErrnoToStatus(errno, "fcntl");
  return high;
}

std::string Describe(int wait_status) {
  if (WIFEXITED(wait_status)) {
    return absl::StrCat("exit status ", WEXITSTATUS(wait_status));
  }
  if (WIFSIGNALED(wait_status)) {
    return absl::StrCat("signal ", WTERMSIG(wait_status));
  }
  return "stopped";
}

class Controller {
 public:
  Controller(Method method, Placement placement, std::string server_bin,
             std::vector<std::string> server_args, std::string tmp_root,
             bool keep_tmp)
      : method_(std::move(method)),
        placement_(std::move(placement)),
        server_bin_(std::move(server_bin)),
        server_args_(std::move(server_args)),
        tmp_root_(std::move(tmp_root)),
        keep_tmp_(keep_tmp) {}

  ~Controller() {
    for (pid_t pid : participants_) {
      if (pid > 0) Kill(pid);
    }
    if (server_ > 0) Kill(server_);
    for (int fd : {done_read_, done_write_, release_read_, release_write_}) {
      if (fd >= 0) ::close(fd);
    }
    if (!dir_.empty() && !keep_tmp_) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

  // Run provisions, starts the server and the participants, and waits for
  // them; rank 0 prints the results on this process's stdout.
  absl::Status Run() {
    deadline_ = absl::Now() + absl::Seconds(method_.timeout_s);
    FG_RETURN_IF_ERROR(MakeDir());
    ProvisionOptions provision;
    provision.out_dir = dir_ + "/pki";
    provision.server_names = {"localhost", "127.0.0.1"};
    if (placement_.server_host != "127.0.0.1") {
      provision.server_names.push_back(placement_.server_host);
    }
    provision.group = kGroup;
    for (int i = 0; i < method_.np; ++i) {
      provision.participants.push_back(Site(i));
    }
    FG_RETURN_IF_ERROR(Provision(provision));
    FG_RETURN_IF_ERROR(StartServer());
    FG_RETURN_IF_ERROR(StartParticipants());
    FG_RETURN_IF_ERROR(AwaitParticipants());
    return StopServer();
  }

  const std::string& server_log() const { return server_log_; }

 private:
  static void Kill(pid_t pid) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }

  absl::Status MakeDir() {
    // Shared outputs live in tmpfs, so that they cost memory, not disk I/O.
    const std::string root =
        method_.shared_output ? std::string("/dev/shm") : tmp_root_;
    std::string tmpl = root + "/fedgather-allgather-bench-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) return ErrnoToStatus(errno, tmpl);
    dir_ = tmpl;
    server_log_ = dir_ + "/server.log";
    return absl::OkStatus();
  }

  absl::Status StartServer() {
    const std::string pki = dir_ + "/pki";
    const std::string port_file = dir_ + "/port";
    std::vector<std::string> args = {server_bin_,
                                     "--listen",
                                     placement_.server_host + ":0",
                                     "--port-file",
                                     port_file,
                                     "--cert",
                                     pki + "/server/cert.pem",
                                     "--key",
                                     pki + "/server/key.pem",
                                     "--client-ca",
                                     pki + "/server/ca.pem",
                                     "--policy",
                                     pki + "/policy.yaml"};
    if (method_.insecure) args.push_back("--insecure-plaintext-for-benchmarks");
    args.insert(args.end(), server_args_.begin(), server_args_.end());
    FG_ASSIGN_OR_RETURN(server_, Spawn(Wrapped(placement_.server_wrap, 0, args),
                                       {}, server_log_, server_log_));
    // The server writes the port file once it listens; poll for it.
    const absl::Time until = absl::Now() + absl::Seconds(30);
    while (absl::Now() < until) {
      int status = 0;
      if (::waitpid(server_, &status, WNOHANG) == server_) {
        server_ = 0;
        return absl::UnavailableError(
            absl::StrCat("fedgather-server exited (", Describe(status),
                         "); see its log ", server_log_));
      }
      absl::StatusOr<std::string> port = ReadFileToString(port_file);
      if (port.ok() && absl::EndsWith(*port, "\n")) {
        address_ = absl::StrCat(placement_.server_host, ":",
                                absl::StripAsciiWhitespace(*port));
        return absl::OkStatus();
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return absl::DeadlineExceededError(
        "fedgather-server did not listen within 30 s");
  }

  absl::Status StartParticipants() {
    char self[4096];
    const ssize_t len = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0) return ErrnoToStatus(errno, "/proc/self/exe");
    self[len] = '\0';
    FG_ASSIGN_OR_RETURN(std::tie(done_read_, done_write_), HighPipe());
    FG_ASSIGN_OR_RETURN(std::tie(release_read_, release_write_), HighPipe());
    for (int rank = 0; rank < method_.np; ++rank) {
      std::vector<std::string> args = {
          self,           "--participant",
          "--rank",       absl::StrCat(rank),
          "--address",    address_,
          "--peer-host",  placement_.RankHost(rank),
          "--tls-dir",    absl::StrCat(dir_, "/pki/", Site(rank)),
          "--server-pid", absl::StrCat(server_),
          "--shared-dir", dir_,
          "--done-fd",    "3",
          "--release-fd", "4",
          "--np",         absl::StrCat(method_.np),
          "--sizes",      method_.sizes,
          "--ops",        method_.ops,
          "--impl-name",  method_.impl_name,
          "--warmup",     absl::StrCat(method_.warmup),
          "--target-s",   absl::StrCat(method_.target_s),
          "--long-op-s",  absl::StrCat(method_.long_op_s),
          "--min-iters",  absl::StrCat(method_.min_iters),
          "--max-iters",  absl::StrCat(method_.max_iters),
          "--timeout-s",  absl::StrCat(method_.timeout_s),
          "--data-plane", method_.data_plane};
      if (method_.insecure) args.push_back("--insecure");
      if (method_.shared_output) args.push_back("--shared-output");
      // Only rank 0 prints results; the others' stdout is discarded.
      FG_ASSIGN_OR_RETURN(pid_t pid,
                          Spawn(Wrapped(placement_.rank_wrap, rank, args),
                                {{3, done_write_}, {4, release_read_}},
                                rank == 0 ? "" : "/dev/null", ""));
      participants_.push_back(pid);
    }
    ::close(done_write_);
    ::close(release_read_);
    done_write_ = release_read_ = -1;
    return absl::OkStatus();
  }

  // AwaitParticipants waits until every rank has said done (then releases
  // them all and reaps them), a process fails, or the deadline passes.
  absl::Status AwaitParticipants() {
    int done = 0;
    bool released = false;
    while (true) {
      size_t running = 0;
      for (size_t rank = 0; rank < participants_.size(); ++rank) {
        if (participants_[rank] == 0) continue;
        int status = 0;
        if (::waitpid(participants_[rank], &status, WNOHANG) !=
            participants_[rank]) {
          ++running;
          continue;
        }
        participants_[rank] = 0;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
          return absl::InternalError(
              absl::StrCat("rank ", rank, " failed (", Describe(status), ")"));
        }
      }
      if (running == 0) return absl::OkStatus();
      int status = 0;
      if (::waitpid(server_, &status, WNOHANG) == server_) {
        server_ = 0;
        return absl::UnavailableError(absl::StrCat(
            "fedgather-server exited (", Describe(status), ") during the run"));
      }
      if (absl::Now() > deadline_) {
        return absl::DeadlineExceededError(absl::StrCat(
            "the run took more than --timeout-s ", method_.timeout_s,
            " s; ranks done: ", done, "/", method_.np));
      }
      struct pollfd pfd = {done_read_, POLLIN, 0};
      if (released || ::poll(&pfd, 1, 100) <= 0) {
        if (released) absl::SleepFor(absl::Milliseconds(20));
        continue;
      }
      char buffer[256];
      const ssize_t got = ::read(done_read_, buffer, sizeof(buffer));
      if (got <= 0) {  // every writer has exited; the reaping sees how
        absl::SleepFor(absl::Milliseconds(20));
        continue;
      }
      done += static_cast<int>(std::count(buffer, buffer + got, '\n'));
      if (done == method_.np) {
        ::close(release_write_);
        release_write_ = -1;
        released = true;
      }
    }
  }

  absl::Status StopServer() {
    const absl::StatusOr<double> cpu = CpuSeconds(server_);
    const absl::StatusOr<int64_t> peak = PeakRssBytes(server_);
    std::printf(
        "#server_total impl=%s N=%d server_cpu_s=%.2f "
        "server_peak_rss_bytes_last_config=%lld\n",
        method_.impl_name.c_str(), method_.np, cpu.value_or(NAN),
        static_cast<long long>(peak.value_or(-1)));
    std::fflush(stdout);
    ::kill(server_, SIGTERM);
    int status = 0;
    ::waitpid(server_, &status, 0);
    server_ = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return absl::InternalError(
          absl::StrCat("fedgather-server stopped with ", Describe(status)));
    }
    return absl::OkStatus();
  }

  const Method method_;
  const Placement placement_;
  const std::string server_bin_;
  const std::vector<std::string> server_args_;
  const std::string tmp_root_;
  const bool keep_tmp_;
  absl::Time deadline_;
  std::string dir_;
  std::string server_log_;
  std::string address_;
  pid_t server_ = 0;
  std::vector<pid_t> participants_;  // by rank; 0 once reaped
  int done_read_ = -1, done_write_ = -1;
  int release_read_ = -1, release_write_ = -1;
};

// DefaultServerBin is fedgather-server of the same build tree:
// BUILD/bench/allgather_bench -> BUILD/server/fedgather-server.
std::string DefaultServerBin() {
  std::error_code ec;
  const std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "fedgather-server";
  return (self.parent_path().parent_path() / "server" / "fedgather-server")
      .string();
}

void PrintTail(const std::string& path, size_t bytes) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return;
  const size_t from = text->size() > bytes ? text->size() - bytes : 0;
  std::fprintf(stderr, "--- last %zu bytes of %s ---\n%s\n", bytes,
               path.c_str(), text->substr(from).c_str());
}

int Main(int argc, char** argv) {
  Method method;
  ParticipantFlags participant;
  bool participant_mode = false;
  bool header = false, keep_tmp = false;
  std::string server_bin = DefaultServerBin();
  std::vector<std::string> server_args;
  Placement placement;
  std::string tmp_root = "/tmp";
  CLI::App app{
      "fedgather all_gather / all_reduce benchmark: a real server and N "
      "participant processes, measured as ../shared/bench/peers does"};
  app.add_option("--np", method.np, "participants (processes)")
      ->check(CLI::Range(2, 4096));
  app.add_option("--sizes", method.sizes,
                 "comma list of bytes per rank (multiples of 4)")
      ->capture_default_str();
  app.add_option("--ops,--op", method.ops,
                 "comma list of all_gather, all_reduce (MEAN)")
      ->capture_default_str();
  app.add_option("--impl-name", method.impl_name,
                 "impl column (default fedgather_tls, or fedgather_plain "
                 "with --insecure)");
  app.add_flag("--insecure", method.insecure,
               "plaintext comparison mode: the server runs with "
               "--insecure-plaintext-for-benchmarks");
  app.add_option("--data-plane", method.data_plane,
                 "relay, direct or auto: whether the members offer peer "
                 "endpoints (direct: and require the direct plane)")
      ->check(CLI::IsMember({"relay", "direct", "auto"}))
      ->capture_default_str();
  app.add_option("--warmup", method.warmup, "warm-up iterations")
      ->capture_default_str();
  app.add_option("--target-s", method.target_s,
                 "timed work per (S, op), seconds")
      ->capture_default_str();
  app.add_option("--long-op-s", method.long_op_s,
                 "one warm-up only when the first took longer")
      ->capture_default_str();
  app.add_option("--min-iters", method.min_iters)->capture_default_str();
  app.add_option("--max-iters", method.max_iters)->capture_default_str();
  app.add_option("--timeout-s", method.timeout_s,
                 "bound on the whole run (and on each collective)")
      ->capture_default_str();
  app.add_flag("--shared-output", method.shared_output,
               "all_gather outputs of all ranks in one shared tmpfs mapping "
               "(for N*S too large for N private copies)");
  app.add_option("--server-bin", server_bin, "fedgather-server binary")
      ->capture_default_str();
  app.add_option("--server-arg", server_args,
                 "extra fedgather-server argument (repeatable), e.g. "
                 "--server-arg=--max-buffered-mib=64");
  app.add_option("--server-host", placement.server_host,
                 "address the server listens on (port chosen by it)")
      ->capture_default_str();
  app.add_option("--rank-hosts", placement.rank_hosts,
                 "comma list: rank r offers its peer endpoint on the r-th "
                 "(default 127.0.0.1)")
      ->delimiter(',');
  app.add_option("--server-wrap", placement.server_wrap,
                 "command prefix that starts the server (split at spaces), "
                 "e.g. \"ip netns exec net-s\"");
  app.add_option("--rank-wrap", placement.rank_wrap,
                 "command prefix that starts rank r ({rank} becomes r), "
                 "e.g. \"ip netns exec net-{rank}\"");
  app.add_option("--tmp-root", tmp_root, "where the temporary directory goes")
      ->capture_default_str();
  app.add_flag("--keep-tmp", keep_tmp,
               "keep the temporary directory (certificates, server log)");
  app.add_flag("--header", header, "print the CSV header line first");
  // The participant mode, used by the controller only.
  const std::string hidden;
  app.add_flag("--participant", participant_mode)->group(hidden);
  app.add_option("--rank", participant.rank)->group(hidden);
  app.add_option("--address", participant.address)->group(hidden);
  app.add_option("--peer-host", participant.peer_host)->group(hidden);
  app.add_option("--tls-dir", participant.tls_dir)->group(hidden);
  app.add_option("--shared-dir", participant.shared_dir)->group(hidden);
  app.add_option("--server-pid", participant.server_pid)->group(hidden);
  app.add_option("--done-fd", participant.done_fd)->group(hidden);
  app.add_option("--release-fd", participant.release_fd)->group(hidden);
  CLI11_PARSE(app, argc, argv);
  if (method.impl_name.empty()) {
    method.impl_name =
        absl::StrCat(method.insecure ? "fedgather_plain" : "fedgather_tls",
                     method.data_plane == "relay" ? "" : "_",
                     method.data_plane == "relay" ? "" : method.data_plane);
  }

  if (participant_mode) {
    const absl::Status status = Participant(method, participant).Run();
    if (!status.ok()) {
      std::fprintf(stderr, "allgather_bench rank %d: %s\n", participant.rank,
                   status.ToString().c_str());
      return 1;
    }
    return 0;
  }

  for (const absl::Status& status :
       {ParseSizes(method.sizes).status(), ParseOps(method.ops).status()}) {
    if (!status.ok()) {
      std::fprintf(stderr, "allgather_bench: %s\n",
                   std::string(status.message()).c_str());
      return 2;
    }
  }
  if (header) {
    std::printf(
        "impl,op,N,bytes_per_rank,median_s,algbw_GBps,busbw_GBps,min_s,"
        "p90_s,mean_s,iters\n");
    std::fflush(stdout);
  }
  if (!placement.rank_hosts.empty() &&
      static_cast<int>(placement.rank_hosts.size()) != method.np) {
    std::fprintf(stderr,
                 "allgather_bench: --rank-hosts names %zu hosts for --np %d\n",
                 placement.rank_hosts.size(), method.np);
    return 2;
  }
  Controller controller(method, placement, server_bin, server_args, tmp_root,
                        keep_tmp);
  const absl::Status status = controller.Run();
  if (!status.ok()) {
    std::printf("#ERROR %s N=%d: %s\n", method.impl_name.c_str(), method.np,
                status.ToString().c_str());
    std::fflush(stdout);
    PrintTail(controller.server_log(), 4000);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace fedgather::bench

int main(int argc, char** argv) { return fedgather::bench::Main(argc, argv); }
