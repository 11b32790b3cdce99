// The soak test (issue 9): a real fedgather-server process, with a signed
// audit log that rotates every 8 MiB, and eight participants, one thread and
// one Client each, every one connected through its own TcpProxy, run
// --rounds consecutive rounds (2,000 by default) in one epoch of group
// "demo". Each round's collective (mostly all_gather, some all_gather_v,
// all_reduce and all_gather_bytes), its tensors and their sizes (1 byte to
// 1 MiB per rank, log-uniform) and its fault come from --seed
// (round_plan.h), and so does the chunk size each rank cuts its upload to
// (half the ranks their own, odd half the time, so ranks cut differently and
// inside elements): about one round in ten cuts a random participant's TCP
// connection part-way through its upload or its download, so that the
// client library resumes its session and its collective. Every rank checks
// every result byte for byte against the deterministic inputs.
//
// The server process's RSS and open descriptors are read after a warm-up
// (round 100), every 500 rounds and at the end, each time once every rank
// has run a few tiny rounds (which push the large ones out of the server's
// cache of completed rounds kept for resumes) and stopped. The test asserts
// that they stayed flat, stops the server with SIGTERM, checks that the
// audit log holds one commit per round and no abort, and verifies the chain
// with `fedgather audit verify --cert`. Past --max-minutes it prints where
// every rank was, kills the server and exits 3 rather than hang.
//
// Not registered with ctest: tests/soak/run.sh builds and runs it.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "common/file_io.h"
#include "tests/common/process_stats.h"
#include "tests/common/subprocess.h"
#include "tests/e2e/server_process.h"
#include "tests/e2e/tcp_proxy.h"
#include "tests/e2e/test_cluster.h"
#include "tests/soak/round_plan.h"

namespace fedgather::testing {
namespace {

constexpr int kWorld = 8;
// Tiny rounds every rank runs before each sample: one more than the
// completed rounds a group keeps for resumes
// (server/membership/group_state.cc), so that the sample does not count
// whichever large rounds happened last.
constexpr int kFlushRounds = 5;
// RSS may end at most this far above the warm-up sample. The flush rounds
// empty the server's round cache, but the allocator keeps what rounds of up
// to 8 MiB (eight 1 MiB contributions) fragmented, and the warm-up sample
// need not have seen the largest rounds yet: 64 MiB is eight such rounds.
// A leak of 32 KiB per round, or of any round's contributions (about 600 KiB
// a round on average), crosses it within 2,000 rounds.
constexpr int64_t kRssGrowthLimitKiB = 64 << 10;
// Once settled, the server holds the same listener, log, audit file, epoll
// and wakeup descriptors and eight connections as at the warm-up sample; the
// slack covers one connection the server has not yet seen close and one
// descriptor gRPC may open lazily.
constexpr int kFdSlack = 2;
constexpr absl::Duration kCollectiveTimeout = absl::Minutes(3);

struct SoakConfig {
  int rounds = 2000;
  double max_minutes = 30;
  uint64_t seed = 1;
  int cut_percent = 10;
  std::string cut_kinds = "both";  // upload, download or both
  int warmup = 100;
};

// Watchdog ends the whole process, loudly, if the soak runs past its bound:
// it calls `on_expiry` (which reports and kills the server) and exits 3.
class Watchdog {
 public:
  Watchdog(absl::Duration bound, std::function<void()> on_expiry)
      : thread_([this, bound, on_expiry = std::move(on_expiry)] {
          if (done_.WaitForNotificationWithTimeout(bound)) return;
          std::cerr << "\n[ SOAK     ] FAILED: still running after "
                    << absl::FormatDuration(bound) << "\n";
          on_expiry();
          std::cerr.flush();
          std::_Exit(3);
        }) {}
  ~Watchdog() {
    done_.Notify();
    thread_.join();
  }

 private:
  absl::Notification done_;
  std::thread thread_;
};

// Checkpoints: the rank threads stop at each checkpoint until the main
// thread has sampled the server; the first failure stops everything.
class Checkpoints {
 public:
  explicit Checkpoints(std::vector<int> after_rounds)
      : after_rounds_(std::move(after_rounds)),
        arrived_(after_rounds_.size(), 0) {}

  const std::vector<int>& after_rounds() const { return after_rounds_; }

  // Arrive: a rank reached checkpoint `c`; blocks until the main thread
  // releases it. False when the soak failed meanwhile.
  bool Arrive(int c) {
    absl::MutexLock lock(&mu_);
    ++arrived_[c];
    auto released = [this, c]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return released_ > c || !error_.ok();
    };
    mu_.Await(absl::Condition(&released));
    return error_.ok();
  }
  // AwaitAll blocks until every rank has arrived at `c`; false on failure.
  bool AwaitAll(int c) {
    absl::MutexLock lock(&mu_);
    auto all = [this, c]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return arrived_[c] == kWorld || !error_.ok();
    };
    mu_.Await(absl::Condition(&all));
    return error_.ok();
  }
  void Release(int c) {
    absl::MutexLock lock(&mu_);
    released_ = c + 1;
  }
  void Fail(absl::Status error) {
    absl::MutexLock lock(&mu_);
    if (error_.ok()) error_ = std::move(error);
  }
  bool failed() {
    absl::MutexLock lock(&mu_);
    return !error_.ok();
  }
  absl::Status error() {
    absl::MutexLock lock(&mu_);
    return error_;
  }

 private:
  const std::vector<int> after_rounds_;
  absl::Mutex mu_;
  std::vector<int> arrived_ ABSL_GUARDED_BY(mu_);
  int released_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

// What one rank saw over the soak.
struct RankTally {
  std::atomic<int> rounds{0};
  std::atomic<int64_t> stream_resumes{0};  // collective streams resumed
  std::atomic<int64_t> bytes_received{0};  // payload, resent bytes included
};

// Await waits for `work`; with `cut_at` >= 0 it first cuts `proxy` once the
// collective has received `cut_at` payload bytes, unless it completes
// first. The collective's own timeout bounds the wait.
template <typename T>
absl::Status Await(const Work<T>& work, const TransferProgress& progress,
                   int64_t cut_at, TcpProxy& proxy) {
  if (cut_at >= 0) {
    while (!work.IsCompleted()) {
      if (progress.payload_bytes_received.load() >= cut_at) {
        proxy.Cut();
        break;
      }
      // Wakes as soon as the collective completes.
      work.Wait(absl::Microseconds(200)).IgnoreError();
    }
  }
  return work.Wait();
}

std::string Where(int round, const RoundPlan& plan, int rank) {
  return absl::StrCat("round ", round, " (", SoakOpName(plan.op), ") rank ",
                      rank);
}

// Compare returns DATA_LOSS naming the first differing byte, if any.
absl::Status Compare(const uint8_t* got, size_t got_size,
                     const std::vector<uint8_t>& want,
                     const std::string& what) {
  if (got_size != want.size()) {
    return absl::DataLossError(
        absl::StrCat(what, ": ", got_size, " bytes, want ", want.size()));
  }
  if (want.empty() || std::memcmp(got, want.data(), want.size()) == 0) {
    return absl::OkStatus();
  }
  size_t at = 0;
  while (got[at] == want[at]) ++at;
  return absl::DataLossError(
      absl::StrCat(what, ": differs at byte ", at, " of ", want.size()));
}

// RunRound runs `plan` on this rank, injecting its cut through `proxy`
// when this rank is the victim, and checks the result byte for byte.
absl::Status RunRound(Group& group, int round, const RoundPlan& plan,
                      const RoundInputs& inputs, TcpProxy& proxy,
                      RankTally& tally) {
  const int rank = group.rank();
  const int world = group.world_size();
  const int tensors = static_cast<int>(plan.tensors.size());
  const std::string where = Where(round, plan, rank);
  const bool victim = plan.victim == rank;
  TransferStats stats;
  TransferProgress progress;
  CollectiveOptions options;
  options.timeout = kCollectiveTimeout;
  options.stats = &stats;
  options.progress = &progress;
  options.upload_chunk_bytes = plan.chunk_bytes[rank];
  if (victim && plan.cut == CutKind::kUpload) {
    proxy.CutAfterUpstreamBytes(
        static_cast<int64_t>(plan.cut_fraction * UploadBytes(plan, rank)));
  }
  const int64_t cut_at =
      victim && plan.cut == CutKind::kDownload
          ? static_cast<int64_t>(plan.cut_fraction * DownloadBytes(plan, rank))
          : -1;
  std::vector<ConstHostTensor> in;
  for (int t = 0; t < tensors; ++t) {
    const SoakTensor& tensor = plan.tensors[t];
    in.push_back({{tensor.name, tensor.dtype, tensor.shapes[rank]},
                  inputs.bytes[rank][t].data()});
  }

  absl::Status status;
  switch (plan.op) {
    case SoakOp::kAllGather: {
      std::vector<std::vector<uint8_t>> out(tensors);
      std::vector<MutableHostTensor> outputs;
      for (int t = 0; t < tensors; ++t) {
        const SoakTensor& tensor = plan.tensors[t];
        out[t].resize(world * inputs.bytes[rank][t].size());
        std::vector<int64_t> shape = {world};
        shape.insert(shape.end(), tensor.shapes[rank].begin(),
                     tensor.shapes[rank].end());
        outputs.push_back({{tensor.name, tensor.dtype, shape}, out[t].data()});
      }
      status = Await(group.AllGatherIntoAsync(in, outputs, options), progress,
                     cut_at, proxy);
      for (int t = 0; status.ok() && t < tensors; ++t) {
        const size_t part = inputs.bytes[rank][t].size();
        for (int r = 0; status.ok() && r < world; ++r) {
          status = Compare(out[t].data() + r * part, part, inputs.bytes[r][t],
                           absl::StrCat(where, ": tensor ", t, " row ", r));
        }
      }
      break;
    }
    case SoakOp::kAllGatherV: {
      // parts[r][t]; each is resized only by the allocator's one call.
      std::vector<std::vector<std::vector<uint8_t>>> parts(
          world, std::vector<std::vector<uint8_t>>(tensors));
      auto allocate = [&](int r, int t,
                          const TensorSpec& spec) -> absl::StatusOr<void*> {
        const SoakTensor& want = plan.tensors[t];
        if (spec.name != want.name || spec.dtype != want.dtype ||
            spec.shape != want.shapes[r]) {
          return absl::DataLossError(absl::StrCat(
              where, ": rank ", r, " tensor ", t, " arrived as ", spec.name,
              " [", absl::StrJoin(spec.shape, ","), "]"));
        }
        parts[r][t].resize(inputs.bytes[r][t].size());
        return parts[r][t].data();
      };
      status = Await(group.AllGatherVAsync(in, allocate, options), progress,
                     cut_at, proxy);
      for (int r = 0; status.ok() && r < world; ++r) {
        for (int t = 0; status.ok() && t < tensors; ++t) {
          status = Compare(parts[r][t].data(), parts[r][t].size(),
                           inputs.bytes[r][t],
                           absl::StrCat(where, ": part ", r, " tensor ", t));
        }
      }
      break;
    }
    case SoakOp::kAllGatherBytes: {
      const std::vector<uint8_t>& mine = inputs.bytes[rank][0];
      Work<std::vector<std::string>> work = group.AllGatherBytesAsync(
          std::string(mine.begin(), mine.end()), options);
      status = Await(work, progress, cut_at, proxy);
      if (!status.ok()) break;
      absl::StatusOr<std::vector<std::string>> got = work.Get();
      status = got.status();
      for (int r = 0; status.ok() && r < world; ++r) {
        const std::string& part = (*got)[r];
        status = Compare(reinterpret_cast<const uint8_t*>(part.data()),
                         part.size(), inputs.bytes[r][0],
                         absl::StrCat(where, ": string of rank ", r));
      }
      break;
    }
    case SoakOp::kAllReduce: {
      std::vector<std::vector<int64_t>> out(tensors);
      std::vector<MutableHostTensor> outputs;
      for (int t = 0; t < tensors; ++t) {
        out[t].resize(inputs.sums[t].size());
        outputs.push_back({in[t].spec, out[t].data()});
      }
      status = Await(
          group.AllReduceAsync(in, outputs, v1::SUM, /*weight=*/1, options),
          progress, cut_at, proxy);
      for (int t = 0; status.ok() && t < tensors; ++t) {
        std::vector<uint8_t> want(inputs.sums[t].size() * sizeof(int64_t));
        std::memcpy(want.data(), inputs.sums[t].data(), want.size());
        status = Compare(reinterpret_cast<const uint8_t*>(out[t].data()),
                         want.size(), want,
                         absl::StrCat(where, ": sum of tensor ", t));
      }
      break;
    }
  }
  // An upload cut fires within the upload; disarm it in case it did not.
  if (victim && plan.cut == CutKind::kUpload) proxy.CutAfterUpstreamBytes(-1);
  tally.stream_resumes += std::max(0, stats.streams - 1);
  tally.bytes_received += stats.payload_bytes_received;
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat(where, ": ", status.message()));
  }
  return absl::OkStatus();
}

// AuditFiles returns the audit log's rotated files, oldest first, then the
// active one.
std::vector<std::string> AuditFiles(const std::string& active) {
  const size_t slash = active.rfind('/');
  const std::string dir = active.substr(0, slash);
  const std::string prefix = active.substr(slash + 1) + ".";
  std::vector<std::string> rotated;
  if (DIR* listing = ::opendir(dir.c_str())) {
    while (const dirent* entry = ::readdir(listing)) {
      if (absl::StartsWith(entry->d_name, prefix)) {
        rotated.push_back(dir + "/" + entry->d_name);
      }
    }
    ::closedir(listing);
  }
  std::sort(rotated.begin(), rotated.end());  // zero-padded: oldest first
  rotated.push_back(active);
  return rotated;
}

// Tail returns the whole lines within the last `bytes` of `text`.
std::string Tail(const std::string& text, size_t bytes) {
  if (text.size() <= bytes) return text;
  const size_t line = text.find('\n', text.size() - bytes);
  return line == std::string::npos ? "" : text.substr(line + 1);
}

// ServerLogReport keeps the server's whole log, which the cluster's
// directory loses when the test ends, in the test temporary directory, and
// returns its tail and where the rest is.
std::string ServerLogReport(const ServerProcess& server) {
  const std::string log = server.Log();
  const std::string kept = ::testing::TempDir() + "fedgather_soak_server.log";
  const absl::Status written = WriteStringToFile(kept, log);
  return absl::StrCat("server log (tail; all of it in ",
                      written.ok() ? kept : written.ToString(), "):\n",
                      Tail(log, 8000));
}

class SoakTest : public ::testing::Test {
 public:
  explicit SoakTest(const SoakConfig& config) : config_(config) {}

  void TestBody() override;

 private:
  const SoakConfig config_;
};

void SoakTest::TestBody() {
  const absl::Time began = absl::Now();
  const int rounds = config_.rounds;
  ClusterOptions cluster_options(kWorld);
  cluster_options.in_process_server = false;
  TestCluster cluster(cluster_options);
  ServerProcess server(
      cluster, {"--audit-log", cluster.audit_path(), "--audit-rotate-mib", "8",
                "--heartbeat-interval", "0.2", "--resume-grace", "5",
                "--round-timeout", "120", "--log-format", "text"});
  server.Start(0);
  const pid_t pid = server.pid();
  ASSERT_GT(pid, 0);

  std::vector<RankTally> tallies(kWorld);
  Watchdog watchdog(absl::Minutes(config_.max_minutes), [&] {
    std::cerr << "rounds done per rank:";
    for (const RankTally& tally : tallies) std::cerr << " " << tally.rounds;
    std::cerr << "\n" << ServerLogReport(server) << "\n";
    ::kill(pid, SIGKILL);
  });

  std::vector<std::unique_ptr<TcpProxy>> proxies;
  std::vector<std::unique_ptr<Client>> clients;
  for (int r = 0; r < kWorld; ++r) {
    proxies.push_back(std::make_unique<TcpProxy>(server.port()));
    clients.push_back(
        cluster.ConnectVia(TestCluster::Site(r), proxies[r]->address()));
    ASSERT_NE(clients[r], nullptr);
  }
  std::vector<std::unique_ptr<Group>> groups(kWorld);
  RunRanks(kWorld, [&](int r) {
    JoinOptions join{"demo", kWorld, r, absl::Seconds(60)};
    join.resume_grace = absl::Seconds(10);
    absl::StatusOr<std::unique_ptr<Group>> group = clients[r]->Join(join);
    ASSERT_TRUE(group.ok()) << group.status();
    groups[r] = *std::move(group);
  });
  for (const auto& group : groups) ASSERT_NE(group, nullptr);

  // Sample after the warm-up, every 500 rounds, and at the end.
  const int warmup = std::max(1, std::min(config_.warmup, rounds / 2));
  std::set<int> after = {warmup, rounds};
  for (int r = 500; r < rounds; r += 500) {
    if (r > warmup) after.insert(r);
  }
  Checkpoints checkpoints(std::vector<int>(after.begin(), after.end()));
  PlanOptions plan_options;
  plan_options.seed = config_.seed;
  plan_options.world = kWorld;
  plan_options.cut_percent = config_.cut_percent;
  plan_options.upload_cuts = config_.cut_kinds != "download";
  plan_options.download_cuts = config_.cut_kinds != "upload";
  SharedRoundInputs shared(plan_options);

  std::vector<std::thread> ranks;
  const absl::Time rounds_began = absl::Now();
  for (int rank = 0; rank < kWorld; ++rank) {
    ranks.emplace_back([&, rank] {
      Group& group = *groups[rank];
      TcpProxy& proxy = *proxies[rank];
      size_t next_checkpoint = 0;
      for (int round = 0; round < rounds; ++round) {
        if (checkpoints.failed()) return;
        const RoundPlan plan = PlanRound(plan_options, round);
        const absl::Status status = RunRound(
            group, round, plan, *shared.Get(round, plan), proxy, tallies[rank]);
        shared.Done(round);
        if (!status.ok()) return checkpoints.Fail(status);
        ++tallies[rank].rounds;
        if (round + 1 != checkpoints.after_rounds()[next_checkpoint]) continue;
        for (int flush = 0; flush < kFlushRounds; ++flush) {
          const absl::Status flushed = GatherRanks(group);
          if (!flushed.ok()) {
            return checkpoints.Fail(absl::Status(
                flushed.code(),
                absl::StrCat("flush round after round ", round, " rank ", rank,
                             ": ", flushed.message())));
          }
        }
        if (!checkpoints.Arrive(static_cast<int>(next_checkpoint++))) return;
      }
    });
  }

  auto cuts = [&] {
    int n = 0;
    for (const auto& proxy : proxies) n += proxy->cuts();
    return n;
  };
  auto stream_resumes = [&] {
    int64_t n = 0;
    for (const RankTally& tally : tallies) n += tally.stream_resumes;
    return n;
  };
  std::vector<ProcessStats> samples;
  absl::Duration paused;  // spent sampling, while the ranks waited
  for (size_t c = 0; c < checkpoints.after_rounds().size(); ++c) {
    if (!checkpoints.AwaitAll(static_cast<int>(c))) break;
    const absl::Time pause = absl::Now();
    absl::StatusOr<ProcessStats> stats =
        ReadSettledProcessStats(pid, absl::Seconds(10));
    if (!stats.ok()) {
      checkpoints.Fail(stats.status());
      break;
    }
    samples.push_back(*stats);
    const double seconds = absl::ToDoubleSeconds(pause - rounds_began - paused);
    std::cout << "[ soak     ] after round " << checkpoints.after_rounds()[c]
              << "/" << rounds << ": server " << stats->ToString() << "; "
              << checkpoints.after_rounds()[c] / seconds << " rounds/s, "
              << cuts() << " cuts, " << stream_resumes()
              << " collective streams resumed" << std::endl;
    paused += absl::Now() - pause;
    checkpoints.Release(static_cast<int>(c));
  }
  const absl::Duration round_time = absl::Now() - rounds_began - paused;
  if (checkpoints.failed()) {
    // Ranks waiting on a round the failed rank will never join end once
    // their server is gone and they cannot resume.
    server.Kill();
  }
  for (std::thread& rank : ranks) rank.join();
  ASSERT_TRUE(checkpoints.error().ok()) << checkpoints.error() << "\n"
                                        << ServerLogReport(server);
  ASSERT_EQ(samples.size(), checkpoints.after_rounds().size());

  const ProcessStats& start = samples.front();
  const ProcessStats& end = samples.back();
  int64_t planned_cuts = 0;
  for (int round = 0; round < rounds; ++round) {
    if (PlanRound(plan_options, round).cut != CutKind::kNone) ++planned_cuts;
  }
  int64_t received = 0;
  for (const RankTally& tally : tallies) received += tally.bytes_received;
  std::cout << "[ soak     ] " << rounds << " rounds of " << kWorld
            << " ranks in " << absl::FormatDuration(round_time) << ": "
            << rounds / absl::ToDoubleSeconds(round_time) << " rounds/s, "
            << received / absl::ToDoubleSeconds(round_time) / (1 << 20)
            << " MiB/s received in all\n"
            << "[ soak     ] " << planned_cuts << " rounds planned a cut; "
            << cuts() << " connections cut; " << stream_resumes()
            << " collective streams resumed\n"
            << "[ soak     ] server after round " << warmup << ": "
            << start.ToString() << "\n"
            << "[ soak     ] server at the end:    " << end.ToString()
            << std::endl;
  EXPECT_LE(end.rss_kib, start.rss_kib + kRssGrowthLimitKiB)
      << "the server's RSS grew by " << (end.rss_kib - start.rss_kib) / 1024.0
      << " MiB over " << rounds - warmup << " rounds";
  EXPECT_LE(std::abs(end.fds - start.fds), kFdSlack)
      << "the server held " << start.fds << " descriptors after round "
      << warmup << " and " << end.fds << " at the end";

  // Leave, then stop the server cleanly: it closes the audit log with a
  // signed anchor.
  groups.clear();
  clients.clear();
  EXPECT_EQ(server.Stop(absl::Seconds(60)), 0) << ServerLogReport(server);

  const std::vector<std::string> files = AuditFiles(cluster.audit_path());
  int64_t records = 0, commits = 0, aborts = 0, server_resumes = 0, joins = 0;
  for (const std::string& file : files) {
    for (const nlohmann::json& record : ReadAuditRecords(file)) {
      ++records;
      const std::string action = record.value("action", "");
      const bool ok = record.value("outcome", "") == "OK";
      commits += action == "commit";
      aborts += action == "abort";
      server_resumes += action == "resume";
      joins += action == "join" && ok;
    }
  }
  const int64_t checkpoint_count =
      static_cast<int64_t>(checkpoints.after_rounds().size());
  std::cout << "[ soak     ] audit: " << records << " records in "
            << files.size() << " files; " << commits << " commits, "
            << server_resumes << " collective streams resumed and "
            << joins - kWorld << " sessions resumed, as the server saw them"
            << std::endl;
  EXPECT_EQ(commits, rounds + kFlushRounds * checkpoint_count);
  EXPECT_EQ(aborts, 0);
  std::vector<std::string> verify = {FEDGATHER_CLI_PATH, "audit", "verify",
                                     "--cert",
                                     cluster.dir() + "/server/cert.pem"};
  verify.insert(verify.end(), files.begin(), files.end());
  std::string out, err;
  EXPECT_EQ(RunProcess(verify, &out, &err), 0) << out << err;
  std::cout << "[ soak     ] fedgather audit verify: " << out << err;
  std::cout << "[ soak     ] done in "
            << absl::FormatDuration(
                   absl::Trunc(absl::Now() - began, absl::Milliseconds(1)))
            << std::endl;
}

// ParseFlags reads --rounds N, --max-minutes M, --seed S, --cut-percent P,
// --cut-kinds upload|download|both and --warmup W (or --flag=value); false,
// with a message, on anything else.
bool ParseFlags(int argc, char** argv, SoakConfig* config) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string value;
    if (const size_t eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    }
    int64_t number = 0;
    double minutes = 0;
    bool ok = false;
    if (flag == "--cut-kinds") {
      ok = value == "upload" || value == "download" || value == "both";
      config->cut_kinds = value;
    } else if (flag == "--max-minutes") {
      ok = absl::SimpleAtod(value, &minutes) && minutes > 0;
      config->max_minutes = minutes;
    } else if (absl::SimpleAtoi(value, &number) && number >= 0) {
      ok = true;
      if (flag == "--rounds" && number >= 1) {
        config->rounds = static_cast<int>(number);
      } else if (flag == "--seed") {
        config->seed = static_cast<uint64_t>(number);
      } else if (flag == "--cut-percent" && number <= 100) {
        config->cut_percent = static_cast<int>(number);
      } else if (flag == "--warmup" && number >= 1) {
        config->warmup = static_cast<int>(number);
      } else {
        ok = false;
      }
    }
    if (!ok) {
      std::cerr << "fedgather_soak: bad flag " << argv[i]
                << "\nusage: fedgather_soak [--rounds N (2000)] "
                   "[--max-minutes M (30)] [--seed S (1)] "
                   "[--cut-percent P (10)] [--cut-kinds K (both)] "
                   "[--warmup W (100)] [gtest flags]\n";
      return false;
    }
  }
  return true;
}

}  // namespace
}  // namespace fedgather::testing

int main(int argc, char** argv) {
  using fedgather::testing::SoakConfig;
  ::testing::InitGoogleTest(&argc, argv);  // takes the --gtest_* flags
  SoakConfig config;
  if (!fedgather::testing::ParseFlags(argc, argv, &config)) return 2;
  std::cout << "[ soak     ] " << config.rounds << " rounds, seed "
            << config.seed << ", cuts (" << config.cut_kinds << ") in "
            << config.cut_percent << "% of rounds, at most "
            << config.max_minutes << " minutes" << std::endl;
  ::testing::RegisterTest("SoakTest", "RoundsStayExactAndTheServerStaysFlat",
                          nullptr, nullptr, __FILE__, __LINE__,
                          [config]() -> ::testing::Test* {
                            return new fedgather::testing::SoakTest(config);
                          });
  return RUN_ALL_TESTS();
}
