// audit_overhead_bench: how much the server's audit log slows all_gather.
//
// For each payload size (4 KiB and 16 MiB per rank) and each audit mode (off;
// on with fsync per writer batch, the default; on with fsync per record) it
// starts a fresh in-process fedgather server over mutual TLS on 127.0.0.1:0
// and one thread per rank in this process, warms up, then times rounds of
// AllGatherInto. A round's time is the slowest rank's wall time for its
// AllGatherInto call; ranks start each round together at a barrier, and every
// round's gathered bytes are checked against what each rank sent (each 4 KiB
// of every input carries a per-round stamp, so a stale output fails too).
//
// Each size runs its modes twice in mirrored order (off, group, record, then
// record, group, off) so that linear drift on a noisy machine cancels out;
// both repetitions are printed, then the two pooled.
//
// Output: comment lines (#) about the machine and setup, then CSV tables
//   mode,bytes_per_rank,ranks,rounds,median_s,p90_s,mean_s,ratio_vs_off
// where ratio_vs_off = median(mode) / median(off) at the same size and
// repetition. Progress goes to stderr. Exit status 1 on any failure.
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/provision.h"
#include "common/status_macros.h"
#include "common/tensor_spec.h"
#include "common/tls_credentials.h"
#include "server/fedgather_server.h"
#include "server/observe/audit_log.h"

namespace fedgather::bench {
namespace {

constexpr char kGroup[] = "demo";
// Every kStampStride bytes of an input start with an 8-byte round stamp.
constexpr size_t kStampStride = 4096;

struct Flags {
  int ranks = 4;
  int rounds_4k = 200;
  int rounds_16m = 20;
  int warmup = 3;
  int repetitions = 2;
  int anchor_every = 1000;
  std::string tmp_root = "/tmp";
};

enum class Mode { kOff, kGroupCommit, kEveryRecord };

const char* ModeName(Mode mode) {
  switch (mode) {
    case Mode::kOff:
      return "off";
    case Mode::kGroupCommit:
      return "audit_fsync_group";
    case Mode::kEveryRecord:
      return "audit_fsync_record";
  }
  return "?";
}

std::string Site(int i) { return absl::StrCat("site-", i + 1); }

// Barrier blocks `n` threads until all of them have called Wait; reusable.
// (C++17 has no std::barrier.)
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}

  void Wait() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    const uint64_t generation = generation_;
    if (++waiting_ == n_) {
      waiting_ = 0;
      ++generation_;
      return;
    }
    auto released = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return generation_ != generation;
    };
    mu_.Await(absl::Condition(&released));
  }

 private:
  const int n_;
  absl::Mutex mu_;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
};

uint64_t Stamp(int round, int rank) {
  return 0x5A5A000000000000ull ^ (static_cast<uint64_t>(round + 1) << 16) ^
         static_cast<uint64_t>(rank);
}

// StampInput writes `stamp` at the start of every kStampStride block.
void StampInput(uint8_t* data, size_t size, uint64_t stamp) {
  for (size_t off = 0; off + sizeof(stamp) <= size; off += kStampStride) {
    std::memcpy(data + off, &stamp, sizeof(stamp));
  }
}

// SliceMatches says whether `got` is `base` with `stamp` at every block.
bool SliceMatches(const uint8_t* got, const uint8_t* base, size_t size,
                  uint64_t stamp) {
  for (size_t off = 0; off < size; off += kStampStride) {
    const size_t len = std::min(kStampStride, size - off);
    if (len < sizeof(stamp)) {
      return std::memcmp(got + off, base + off, len) == 0;
    }
    uint64_t seen;
    std::memcpy(&seen, got + off, sizeof(seen));
    if (seen != stamp) return false;
    if (std::memcmp(got + off + sizeof(stamp), base + off + sizeof(stamp),
                    len - sizeof(stamp)) != 0) {
      return false;
    }
  }
  return true;
}

std::vector<uint8_t> PseudoRandomBytes(size_t size, uint64_t seed) {
  std::vector<uint8_t> bytes(size);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t off = 0; off < size; off += sizeof(x)) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(bytes.data() + off, &x, std::min(sizeof(x), size - off));
  }
  return bytes;
}

// Run is one (size, mode, repetition) measurement.
struct Run {
  Mode mode = Mode::kOff;
  size_t bytes_per_rank = 0;
  int repetition = 0;
  std::vector<double> round_s;  // slowest rank's time, per timed round
  int64_t audit_lines = 0;      // lines in the audit file after shutdown
  int64_t audit_bytes = 0;
};

int64_t CountLines(const std::string& path) {
  std::ifstream in(path);
  int64_t lines = 0;
  std::string line;
  while (std::getline(in, line)) ++lines;
  return lines;
}

// Measure starts a server in `mode` with certificates from `cert_dir`, joins
// flags.ranks ranks, and runs flags.warmup + `rounds` all_gathers of
// `bytes_per_rank` per rank. The audit file goes in `run_dir`.
absl::Status Measure(const Flags& flags, const std::string& cert_dir,
                     const std::string& run_dir, int rounds, Run& run) {
  const int n = flags.ranks;
  const size_t size = run.bytes_per_rank;

  server::ServerOptions options;
  FG_ASSIGN_OR_RETURN(options.tls, ReadTlsDir(cert_dir + "/server"));
  options.policy_path = cert_dir + "/policy.yaml";
  options.limits.round_timeout = absl::Seconds(60);
  const std::string audit_path = run_dir + "/audit.jsonl";
  if (run.mode != Mode::kOff) {
    options.audit.path = audit_path;
    options.audit.fsync = run.mode == Mode::kGroupCommit
                              ? server::AuditFsync::kGroupCommit
                              : server::AuditFsync::kEveryRecord;
    options.audit.anchor_every = flags.anchor_every;
    options.audit_sign = true;
  }
  FG_ASSIGN_OR_RETURN(std::unique_ptr<server::FedgatherServer> server,
                      server::FedgatherServer::Start(std::move(options)));
  const std::string address = absl::StrCat("127.0.0.1:", server->port());

  // Per-rank base bytes are read by every rank's check; each rank's input
  // (base plus stamps) and output are its own.
  std::vector<std::vector<uint8_t>> base(n);
  for (int r = 0; r < n; ++r) base[r] = PseudoRandomBytes(size, 1000 + r);
  std::vector<std::unique_ptr<Client>> clients(n);
  std::vector<std::unique_ptr<Group>> groups(n);
  std::vector<std::vector<double>> rank_s(n, std::vector<double>(rounds, 0));

  Barrier barrier(n);
  std::atomic<bool> failed{false};
  absl::Mutex error_mu;
  absl::Status first_error;
  auto fail = [&](absl::Status status) {
    absl::MutexLock lock(&error_mu);
    if (first_error.ok()) first_error = std::move(status);
    failed.store(true);
  };

  auto rank_main = [&](int rank) {
    absl::Status setup = [&]() -> absl::Status {
      ClientOptions client_options;
      client_options.server_address = address;
      FG_ASSIGN_OR_RETURN(client_options.tls,
                          ReadTlsDir(cert_dir + "/" + Site(rank)));
      FG_ASSIGN_OR_RETURN(clients[rank], Client::Connect(client_options));
      FG_ASSIGN_OR_RETURN(
          groups[rank],
          clients[rank]->Join({kGroup, n, rank, absl::Seconds(60)}));
      return absl::OkStatus();
    }();
    if (!setup.ok()) fail(setup);

    std::vector<uint8_t> input = base[rank];
    std::vector<uint8_t> output(size * n, 0xEE);
    const TensorSpec spec{"payload", DType::kU8, {static_cast<int64_t>(size)}};
    const ConstHostTensor in{spec, input.data()};
    MutableHostTensor out{spec, output.data()};
    out.spec.shape.insert(out.spec.shape.begin(), n);
    CollectiveOptions collective;
    collective.timeout = absl::Seconds(120);

    const int total = flags.warmup + rounds;
    for (int round = 0; round < total; ++round) {
      StampInput(input.data(), size, Stamp(round, rank));
      for (int r = 0; r < n; ++r) {
        StampInput(output.data() + r * size, size, ~uint64_t{0});
      }
      // Every rank passes the same barriers, so a failure seen here makes
      // all of them stop after the same round.
      barrier.Wait();
      if (failed.load()) break;
      const auto start = std::chrono::steady_clock::now();
      absl::Status status =
          groups[rank]->AllGatherInto({&in, 1}, {&out, 1}, collective);
      const auto end = std::chrono::steady_clock::now();
      if (!status.ok()) {
        fail(absl::Status(status.code(),
                          absl::StrCat("rank ", rank, " round ", round, ": ",
                                       status.message())));
        continue;
      }
      for (int r = 0; r < n; ++r) {
        if (!SliceMatches(output.data() + r * size, base[r].data(), size,
                          Stamp(round, r))) {
          fail(absl::DataLossError(absl::StrCat("rank ", rank, " round ", round,
                                                ": slice of rank ", r,
                                                " differs from its input")));
        }
      }
      if (round >= flags.warmup) {
        rank_s[rank][round - flags.warmup] =
            std::chrono::duration<double>(end - start).count();
      }
    }
  };

  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) threads.emplace_back(rank_main, rank);
  for (std::thread& t : threads) t.join();

  // Leave only after every rank is done: a member that leaves ends the
  // epoch for the others.
  groups.clear();
  const absl::Status shutdown = server->Shutdown();
  clients.clear();
  server.reset();
  if (!first_error.ok()) return first_error;
  FG_RETURN_IF_ERROR(shutdown);

  run.round_s.assign(rounds, 0);
  for (int i = 0; i < rounds; ++i) {
    for (int r = 0; r < n; ++r) {
      run.round_s[i] = std::max(run.round_s[i], rank_s[r][i]);
    }
  }
  if (run.mode != Mode::kOff) {
    std::error_code ec;
    run.audit_bytes =
        static_cast<int64_t>(std::filesystem::file_size(audit_path, ec));
    if (ec) {
      return absl::InternalError(
          absl::StrCat("audit file ", audit_path, ": ", ec.message()));
    }
    run.audit_lines = CountLines(audit_path);
    std::filesystem::remove(audit_path, ec);
  }
  return absl::OkStatus();
}

struct Stats {
  double median = 0, p90 = 0, mean = 0;
};

Stats Summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  // Nearest rank: the smallest value with at least 90% of rounds <= it.
  const size_t rank90 = (n * 90 + 99) / 100;
  s.p90 = v[std::max<size_t>(rank90, 1) - 1];
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / n;
  return s;
}

std::string FsTypeName(const std::string& path) {
  struct statfs fs;
  if (::statfs(path.c_str(), &fs) != 0) return "unknown";
  switch (static_cast<uint64_t>(fs.f_type)) {
    case 0xEF53:
      return "ext2/3/4";
    case 0x01021994:
      return "tmpfs";
    case 0x58465342:
      return "xfs";
    case 0x9123683E:
      return "btrfs";
    case 0x794C7630:
      return "overlayfs";
  }
  return absl::StrFormat("0x%x", static_cast<uint64_t>(fs.f_type));
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

void PrintTable(const std::vector<const Run*>& runs, int ranks) {
  std::printf(
      "mode,bytes_per_rank,ranks,rounds,median_s,p90_s,mean_s,"
      "ratio_vs_off\n");
  for (const Run* run : runs) {
    double off_median = 0;
    for (const Run* other : runs) {
      if (other->mode == Mode::kOff &&
          other->bytes_per_rank == run->bytes_per_rank) {
        off_median = Summarize(other->round_s).median;
      }
    }
    const Stats s = Summarize(run->round_s);
    std::printf("%s,%zu,%d,%zu,%.6f,%.6f,%.6f,%.3f\n", ModeName(run->mode),
                run->bytes_per_rank, ranks, run->round_s.size(), s.median,
                s.p90, s.mean, off_median > 0 ? s.median / off_median : 0.0);
  }
}

int Main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"all_gather round time with the audit log off versus on"};
  app.add_option("--ranks", flags.ranks, "ranks (threads) in the group")
      ->check(CLI::Range(2, 64));
  app.add_option("--rounds_4k", flags.rounds_4k, "timed rounds at 4 KiB")
      ->check(CLI::PositiveNumber);
  app.add_option("--rounds_16m", flags.rounds_16m, "timed rounds at 16 MiB")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", flags.warmup, "untimed rounds first")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--repetitions", flags.repetitions,
                 "mirrored passes over the modes per size")
      ->check(CLI::PositiveNumber);
  app.add_option("--anchor_every", flags.anchor_every,
                 "audit records between signed anchors")
      ->check(CLI::PositiveNumber);
  app.add_option("--tmp_root", flags.tmp_root,
                 "where the temporary directory (certs, audit file) goes");
  CLI11_PARSE(app, argc, argv);

  std::string tmpl = flags.tmp_root + "/fedgather-audit-bench-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::fprintf(stderr, "mkdtemp %s: %s\n", tmpl.c_str(),
                 std::strerror(errno));
    return 1;
  }
  const std::string dir = tmpl;
  const std::string cert_dir = dir + "/certs";
  const std::string run_dir = dir + "/run";

  auto cleanup = [&] {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  };

  ProvisionOptions provision;
  provision.out_dir = cert_dir;
  provision.server_names = {"localhost", "127.0.0.1"};
  provision.group = kGroup;
  for (int i = 0; i < flags.ranks; ++i) {
    provision.participants.push_back(Site(i));
  }
  absl::Status status = Provision(provision);
  if (status.ok()) {
    std::error_code ec;
    std::filesystem::create_directories(run_dir, ec);
    if (ec) status = absl::InternalError(ec.message());
  }
  if (!status.ok()) {
    std::fprintf(stderr, "setup: %s\n", status.ToString().c_str());
    cleanup();
    return 1;
  }

  const std::vector<std::pair<size_t, int>> sizes = {
      {size_t{4} << 10, flags.rounds_4k}, {size_t{16} << 20, flags.rounds_16m}};
  const std::vector<Mode> order = {Mode::kOff, Mode::kGroupCommit,
                                   Mode::kEveryRecord};
  std::vector<Run> runs;
  for (const auto& [size, rounds] : sizes) {
    for (int rep = 0; rep < flags.repetitions; ++rep) {
      std::vector<Mode> modes = order;
      if (rep % 2 == 1) std::reverse(modes.begin(), modes.end());
      for (Mode mode : modes) {
        Run run;
        run.mode = mode;
        run.bytes_per_rank = size;
        run.repetition = rep + 1;
        std::fprintf(stderr, "running %s, %zu B/rank, repetition %d ...\n",
                     ModeName(mode), size, rep + 1);
        const absl::Time start = absl::Now();
        status = Measure(flags, cert_dir, run_dir, rounds, run);
        if (!status.ok()) {
          std::fprintf(stderr, "%s, %zu B/rank, repetition %d: %s\n",
                       ModeName(mode), size, rep + 1,
                       status.ToString().c_str());
          cleanup();
          return 1;
        }
        std::fprintf(stderr, "  done in %.1f s\n",
                     absl::ToDoubleSeconds(absl::Now() - start));
        runs.push_back(std::move(run));
      }
    }
  }
  const std::string fs_type = FsTypeName(run_dir);
  cleanup();

  struct utsname uts;
  const std::string kernel = ::uname(&uts) == 0 ? uts.release : "unknown";
  std::printf(
      "# audit_overhead_bench: all_gather with the audit log off vs on\n");
  std::printf("# machine: nproc=%ld kernel=%s cpu=\"%s\"\n",
              ::sysconf(_SC_NPROCESSORS_ONLN), kernel.c_str(),
              CpuModel().c_str());
  std::printf("# date: %s\n", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                                               absl::Now(), absl::UTCTimeZone())
                                  .c_str());
  std::printf(
      "# setup: in-process server (mutual TLS, 127.0.0.1 TCP) and %d ranks, "
      "one thread each, all in this one process\n",
      flags.ranks);
  std::printf(
      "# audit: file in %s/... (%s), signed anchors every %d records; "
      "off = no audit log\n",
      flags.tmp_root.c_str(), fs_type.c_str(), flags.anchor_every);
  std::printf(
      "# round time: max over ranks of the rank's AllGatherInto wall time; "
      "ranks start each round at a barrier; warmup %d rounds; every "
      "round's output verified\n",
      flags.warmup);
  std::printf(
      "# order per size: modes off,group,record then mirrored "
      "record,group,off; ratio_vs_off = median / median(off) of the same "
      "size and repetition\n");
  for (int rep = 1; rep <= flags.repetitions; ++rep) {
    std::printf("# repetition %d\n", rep);
    std::vector<const Run*> table;
    for (const Run& run : runs) {
      if (run.repetition == rep) table.push_back(&run);
    }
    std::stable_sort(table.begin(), table.end(),
                     [](const Run* a, const Run* b) {
                       return std::make_pair(a->bytes_per_rank, a->mode) <
                              std::make_pair(b->bytes_per_rank, b->mode);
                     });
    PrintTable(table, flags.ranks);
  }
  if (flags.repetitions > 1) {
    std::printf("# all repetitions pooled\n");
    std::vector<Run> pooled;
    for (const auto& [size, rounds] : sizes) {
      for (Mode mode : order) {
        Run all;
        all.mode = mode;
        all.bytes_per_rank = size;
        for (const Run& run : runs) {
          if (run.mode == mode && run.bytes_per_rank == size) {
            all.round_s.insert(all.round_s.end(), run.round_s.begin(),
                               run.round_s.end());
          }
        }
        pooled.push_back(std::move(all));
      }
    }
    std::vector<const Run*> table;
    for (const Run& run : pooled) table.push_back(&run);
    PrintTable(table, flags.ranks);
  }
  for (const Run& run : runs) {
    if (run.mode == Mode::kOff) continue;
    std::printf(
        "# audit file: %s %zu B/rank repetition %d: %lld lines, "
        "%lld bytes\n",
        ModeName(run.mode), run.bytes_per_rank, run.repetition,
        static_cast<long long>(run.audit_lines),
        static_cast<long long>(run.audit_bytes));
  }
  return 0;
}

}  // namespace
}  // namespace fedgather::bench

int main(int argc, char** argv) { return fedgather::bench::Main(argc, argv); }
