// ring_bench: the direct data plane's all_gather and all_reduce (client/
// peer: RingAllGather and RingAllReduce of one F32 tensor with SUM, or with
// --algorithm log_steps BruckAllGather and GatherAllReduce) on their own, N
// member processes over mutual-TLS peer links on 127.0.0.1, measured as
// ../shared/bench/peers measures Gloo and MPI (its README, "Method"): per size,
// warm-up (3, or 1 when the first took over 0.2 s), iters = clamp(ceil(target /
// t_warm), 5, 10000) agreed by all ranks (the largest), then `iters`
// back-to-back iterations each timed on every rank; an iteration's time is the
// slowest rank's. The first result is checked (two bytes of each part; two
// sums). No server, no digests, no commit: it is the bytes' path alone, what
// the direct plane adds to a round.
//
//   ring_bench --np 4 --sizes 4096,1048576,16777216
//              [--ops all_gather,all_reduce] [--algorithm ring|log_steps]
//              [--impl NAME]
//
// Prints the peers' CSV:
//   impl,op,N,bytes_per_rank,median_s,algbw_GBps,busbw_GBps,min_s,p90_s,mean_s,iters
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/peer/bruck_all_gather.h"
#include "client/peer/gather_all_reduce.h"
#include "client/peer/peer_dial.h"
#include "client/peer/peer_listener.h"
#include "client/peer/peer_ring.h"
#include "client/peer/peer_socket.h"
#include "client/peer/peer_tls.h"
#include "client/peer/ring_all_gather.h"
#include "client/peer/ring_all_reduce.h"
#include "common/cert_issuer.h"

namespace fedgather {
namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "ring_bench: %s\n", what.c_str());
  std::exit(1);
}

// A free loopback port (bound, read, closed: a small race, for a bench).
int FreePort() {
  absl::StatusOr<PeerSocket> socket = ListenTcp("127.0.0.1:0");
  absl::StatusOr<int> port =
      socket.ok() ? BoundPort(*socket) : absl::StatusOr<int>(socket.status());
  if (!port.ok()) Die(port.status().ToString());
  return *port;
}

double Now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Member {
  int rank = 0;
  int world = 1;
  std::vector<int> ports;
  std::unique_ptr<PeerListener> listener;
  bool log_steps = false;  // --algorithm log_steps
  PeerRing links;          // every link of a PeerRing
  uint64_t op = 0;
  std::vector<char> accumulators;  // the all_reduce's, kept between ops
  std::vector<char> gathered;      // GatherAllReduce's, kept between ops

  // Gather runs one all_gather of `sizes` from `mine` into `out`.
  void Gather(const std::vector<size_t>& sizes, const char* mine, char* out,
              size_t chunk) {
    RingOptions options;
    options.op = ++op;
    options.chunk_bytes = chunk;
    options.stall_timeout = absl::Seconds(60);
    absl::Status status =
        log_steps ? BruckAllGather(rank, sizes, mine, out, links.to_links(),
                                   links.from_links(), options)
                  : RingAllGather(rank, sizes, mine, out, links.to_next(),
                                  links.from_prev(), options);
    if (!status.ok()) Die(status.ToString());
  }
  // Reduce runs one all_reduce (SUM) of `size` bytes of floats.
  void Reduce(size_t size, const char* mine, char* out, size_t chunk) {
    RingOptions options;
    options.op = ++op;
    options.chunk_bytes = chunk;
    options.stall_timeout = absl::Seconds(60);
    const Fingerprint tensors = {
        {"x", DType::kF32, {static_cast<int64_t>(size / 4)}}};
    const std::vector<double> weights(world, 1.0);
    if (log_steps) gathered.resize(size * world);
    absl::Status status =
        log_steps ? GatherAllReduce(rank, tensors, v1::SUM, weights, mine,
                                    gathered.data(), out, links.to_links(),
                                    links.from_links(), options, &accumulators)
                  : RingAllReduce(rank, tensors, v1::SUM, weights, mine, out,
                                  links.to_next(), links.from_prev(), options,
                                  &accumulators);
    if (!status.ok()) Die(status.ToString());
  }
  // AllMax returns the largest of every rank's `values` (elementwise).
  std::vector<double> AllMax(const std::vector<double>& values, size_t chunk) {
    const size_t bytes = values.size() * sizeof(double);
    std::vector<double> all(values.size() * world);
    Gather(std::vector<size_t>(world, bytes),
           reinterpret_cast<const char*>(values.data()),
           reinterpret_cast<char*>(all.data()), chunk);
    std::vector<double> result(values);
    for (int r = 0; r < world; ++r) {
      for (size_t i = 0; i < values.size(); ++i) {
        result[i] = std::max(result[i], all[r * values.size() + i]);
      }
    }
    return result;
  }
};

// Check dies unless `out` holds the op's result: every part for an
// all_gather (of bytes r + 1), the sum of every rank's (r + 1)s for an
// all_reduce.
void Check(const Member& m, const std::string& op, size_t size,
           const std::vector<char>& out) {
  if (op == "all_reduce") {
    float expected = 0;
    for (int r = 0; r < m.world; ++r) expected += static_cast<float>(r + 1);
    for (size_t at : {size_t{0}, size / 4 - 1}) {
      float got;
      std::memcpy(&got, out.data() + 4 * at, 4);
      if (size >= 4 && got != expected) {
        Die(absl::StrCat("wrong sum at element ", at, ": ", got));
      }
    }
    return;
  }
  for (int r = 0; r < m.world; ++r) {
    for (size_t at : {size_t{0}, size - 1}) {
      if (size > 0 && out[r * size + at] != static_cast<char>(r + 1)) {
        Die(absl::StrCat("wrong data from rank ", r));
      }
    }
  }
}

void RunSize(Member& m, const std::string& op, size_t size,
             const std::string& impl, double target_s, size_t chunk) {
  const bool reduce = op == "all_reduce";
  size = reduce ? size / 4 * 4 : size;
  std::vector<char> mine(size);
  if (reduce) {
    const float value = static_cast<float>(m.rank + 1);
    for (size_t i = 0; i + 4 <= size; i += 4) {
      std::memcpy(mine.data() + i, &value, 4);
    }
  } else {
    std::fill(mine.begin(), mine.end(), static_cast<char>(m.rank + 1));
  }
  std::vector<char> out(reduce ? size : size * m.world);
  const std::vector<size_t> parts(m.world, size);
  auto run = [&] {
    if (reduce) {
      m.Reduce(size, mine.data(), out.data(), chunk);
    } else {
      m.Gather(parts, mine.data(), out.data(), chunk);
    }
  };
  std::vector<double> warm;
  int warmups = 3;
  for (int i = 0; i < warmups; ++i) {
    const double t0 = Now();
    run();
    warm.push_back(Now() - t0);
    if (i == 0) {
      Check(m, op, size, out);
      if (m.AllMax({warm[0]}, chunk)[0] > 0.2) warmups = 1;
    }
  }
  std::sort(warm.begin(), warm.end());
  const double t_warm = m.AllMax({warm[warm.size() / 2]}, chunk)[0];
  const int iters = static_cast<int>(std::min(
      10000.0, std::max(5.0, std::ceil(target_s / std::max(t_warm, 1e-9)))));
  std::vector<double> times(iters);
  for (int i = 0; i < iters; ++i) {
    const double t0 = Now();
    run();
    times[i] = Now() - t0;
  }
  std::vector<double> slowest = m.AllMax(times, chunk);
  if (m.rank == 0) {
    std::vector<double> sorted = slowest;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    double mean = 0;
    for (double t : sorted) mean += t / sorted.size();
    // The peers' factors: all_gather algbw = S·N/t, busbw = algbw·(N−1)/N;
    // all_reduce algbw = S/t, busbw = algbw·2(N−1)/N.
    const double algbw =
        static_cast<double>(size) * (reduce ? 1 : m.world) / median / 1e9;
    const double bus = (reduce ? 2.0 : 1.0) * (m.world - 1) / m.world;
    std::printf("%s,%s,%d,%zu,%.9f,%.6f,%.6f,%.9f,%.9f,%.9f,%d\n", impl.c_str(),
                op.c_str(), m.world, size, median, algbw, algbw * bus,
                sorted.front(),
                sorted[std::min(sorted.size() - 1,
                                static_cast<size_t>(0.9 * sorted.size()))],
                mean, iters);
    std::fflush(stdout);
  }
}

void RunMember(Member& m, const std::vector<std::string>& identities,
               const TlsFiles& files, const std::vector<std::string>& ops,
               const std::vector<size_t>& sizes, const std::string& impl,
               double target_s, size_t chunk) {
  absl::StatusOr<std::shared_ptr<const PeerTls>> tls = PeerTls::Create(files);
  if (!tls.ok()) Die(tls.status().ToString());
  absl::StatusOr<PeerSocket> listening =
      ListenTcp(absl::StrCat("127.0.0.1:", m.ports[m.rank]));
  if (!listening.ok()) Die(listening.status().ToString());
  absl::StatusOr<std::unique_ptr<PeerListener>> listener =
      PeerListener::Start(*tls, *std::move(listening), PeerListenerOptions());
  if (!listener.ok()) Die(listener.status().ToString());
  m.listener = *std::move(listener);
  m.listener->ExpectEpoch("bench", 1, m.rank, identities);
  // Every link of a PeerRing (the log-step ones too, unused by the ring,
  // as in the data plane): dial rank + 2^k, then take rank − 2^k's.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (int k = 0; k < LogSteps(m.world); ++k) {
    const int to = (m.rank + (1 << k)) % m.world;
    v1::PeerLinkHello hello;
    hello.set_group("bench");
    hello.set_epoch(1);
    hello.set_from_rank(m.rank);
    hello.set_to_rank(to);
    for (;;) {  // that member's listener may not be up yet
      absl::StatusOr<std::unique_ptr<PeerLink>> link =
          DialPeerLink(**tls, absl::StrCat("127.0.0.1:", m.ports[to]), hello,
                       identities[to], deadline);
      if (link.ok()) {
        m.links.to.push_back(*std::move(link));
        break;
      }
      if (absl::Now() > deadline) Die(link.status().ToString());
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  for (int k = 0; k < LogSteps(m.world); ++k) {
    absl::StatusOr<std::unique_ptr<PeerLink>> from = m.listener->Take(
        "bench", 1, ((m.rank - (1 << k)) % m.world + m.world) % m.world,
        deadline);
    if (!from.ok()) Die(from.status().ToString());
    m.links.from.push_back(*std::move(from));
  }

  for (const std::string& op : ops) {
    for (size_t size : sizes) {
      RunSize(m, op, size, impl, target_s, chunk);
    }
  }
}

int Main(int argc, char** argv) {
  CLI::App app{"ring all_gather and all_reduce over mutual-TLS peer links"};
  int world = 4;
  std::string sizes_text = "4096,1048576,16777216";
  std::string impl = "fedgather_ring_tls";
  double target_s = 0.5;
  size_t chunk = size_t{1} << 20;
  app.add_option("--np", world, "members (processes)")
      ->check(CLI::Range(1, 64));
  app.add_option("--sizes", sizes_text, "bytes per rank, comma-separated");
  std::string ops_text = "all_gather";
  app.add_option("--ops,--op", ops_text,
                 "comma list of all_gather, all_reduce (F32 SUM)");
  app.add_option("--impl", impl, "the CSV's impl column");
  app.add_option("--target-s", target_s, "timed work per size, seconds");
  app.add_option("--chunk-bytes", chunk, "ring chunk size");
  std::string algorithm = "ring";
  app.add_option("--algorithm", algorithm,
                 "ring (RingAllGather, RingAllReduce) or log_steps "
                 "(BruckAllGather, GatherAllReduce)")
      ->check(CLI::IsMember({"ring", "log_steps"}));
  CLI11_PARSE(app, argc, argv);
  std::vector<size_t> sizes;
  for (absl::string_view s : absl::StrSplit(sizes_text, ',')) {
    size_t size = 0;
    if (!absl::SimpleAtoi(s, &size)) Die(absl::StrCat("bad size '", s, "'"));
    sizes.push_back(size);
  }
  const std::vector<std::string> ops = absl::StrSplit(ops_text, ',');
  for (const std::string& op : ops) {
    if (op != "all_gather" && op != "all_reduce") {
      Die(absl::StrCat("--ops: '", op,
                       "' is neither all_gather nor all_reduce"));
    }
  }
  absl::StatusOr<KeyAndCert> ca =
      CreateCertificateAuthority("ring bench CA", absl::Hours(2));
  if (!ca.ok()) Die(ca.status().ToString());
  std::vector<std::string> identities;
  std::vector<TlsFiles> files;
  std::vector<int> ports;
  for (int r = 0; r < world; ++r) {
    identities.push_back(absl::StrCat("site-", r));
    CertificateSpec spec;
    spec.common_name = identities.back();
    spec.client_auth = true;
    absl::StatusOr<KeyAndCert> leaf = IssueCertificate(*ca, spec);
    if (!leaf.ok()) Die(leaf.status().ToString());
    files.push_back({leaf->cert_pem, leaf->key_pem, ca->cert_pem});
    ports.push_back(FreePort());
  }
  std::vector<pid_t> children;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid < 0) Die("fork failed");
    if (pid == 0) {
      Member m;
      m.rank = r;
      m.world = world;
      m.ports = ports;
      m.log_steps = algorithm == "log_steps";
      RunMember(m, identities, files[r], ops, sizes, impl, target_s, chunk);
      std::_Exit(0);  // skip the static destructors of the parent's copy
    }
    children.push_back(pid);
  }
  int failures = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace fedgather

int main(int argc, char** argv) { return fedgather::Main(argc, argv); }
