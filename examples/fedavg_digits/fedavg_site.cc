// fedavg_site: one participant of the federated digits example. It joins a
// fedgather group over mutual TLS, takes the training shard of the non-IID
// split that its rank names, and runs FedAvg rounds (examples/fedavg_digits/
// fedavg.h). Rank 0 prints the setup, the per-round accuracy table, the
// local-only baselines and, last, "final test accuracy: 0.xxx".
// See examples/fedavg_digits/README.md.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "common/data_plane_name.h"
#include "common/status_macros.h"
#include "common/tls_credentials.h"
#include "examples/fedavg_digits/digits_data.h"
#include "examples/fedavg_digits/fedavg.h"

namespace fedgather::fedavg {
namespace {

struct SiteOptions {
  std::string server;
  std::string tls_dir;
  std::string group = "demo";
  int world_size = 4;
  int rank = -1;  // -1: the server assigns by sorted identity
  std::string data;
  std::string aggregate = "both";
  SplitOptions split;
  FederationOptions federation;
  double timeout_s = 300;
  double resume_grace_s = 10;  // the client library's default
  double min_accuracy = 0;
  std::string peer_listen;     // empty: no peer endpoint (the relay)
  std::string peer_advertise;  // empty: the peer_listen address
};

std::string Composition(const Dataset& data) {
  std::string out;
  const std::array<int64_t, kClasses> counts = data.ClassCounts();
  for (int c = 0; c < kClasses; ++c) {
    if (counts[c] > 0)
      absl::StrAppend(&out, out.empty() ? "" : " ", c, ":", counts[c]);
  }
  return out;
}

void PrintSetup(const SiteOptions& o, const Group& group, const Split& split) {
  const TrainOptions& t = o.federation.train;
  absl::PrintF(
      "fedavg_digits: %d sites, aggregation %s, %d rounds x %d local "
      "epochs, MLP 64-%d-10, SGD lr %g batch %d, split seed %d\n",
      group.world_size(), o.aggregate, o.federation.rounds, t.local_epochs,
      t.hidden, t.learning_rate, t.batch_size, o.split.seed);
  absl::PrintF("  test set: %d examples (%s)\n", split.test.size(),
               Composition(split.test));
  for (int r = 0; r < group.world_size(); ++r) {
    absl::PrintF("  rank %d %s: %d examples, label:count %s\n", r,
                 group.identities()[r], split.sites[r].size(),
                 Composition(split.sites[r]));
  }
  absl::PrintF("%5s  %8s  %11s  %13s  %7s\n", "round", "test_acc",
               "rank0_local", "max|ar-ag|", "seconds");
  std::fflush(stdout);
}

absl::Status Run(SiteOptions o) {
  FG_ASSIGN_OR_RETURN(o.federation.aggregation, ParseAggregation(o.aggregate));
  o.federation.collective.timeout = absl::Seconds(o.timeout_s);
  o.federation.collective.resume_grace = absl::Seconds(o.resume_grace_s);
  FG_ASSIGN_OR_RETURN(const Dataset all, LoadDigits(o.data));
  FG_ASSIGN_OR_RETURN(TlsFiles tls, ReadTlsDir(o.tls_dir));
  FG_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                      Client::Connect({o.server, std::move(tls)}));
  JoinOptions join;
  join.group = o.group;
  join.world_size = o.world_size;
  if (o.rank >= 0) join.rank = o.rank;
  join.timeout = absl::Seconds(o.timeout_s);
  join.resume_grace = absl::Seconds(o.resume_grace_s);
  join.peer_listen = o.peer_listen;
  join.peer_advertise = o.peer_advertise;
  FG_ASSIGN_OR_RETURN(std::unique_ptr<Group> group, client->Join(join));

  o.split.sites = group->world_size();
  FG_ASSIGN_OR_RETURN(const Split split, SplitNonIid(all, o.split));
  const bool leader = group->rank() == 0;
  if (leader) {
    PrintSetup(o, *group, split);
    o.federation.on_round = [](const RoundResult& r) {
      absl::PrintF("%5d  %8.4f  %11.4f  %13s  %7.3f\n", r.round,
                   r.test_accuracy, r.local_accuracy,
                   r.max_abs_diff < 0 ? std::string("-")
                                      : absl::StrFormat("%.2e", r.max_abs_diff),
                   r.seconds);
      std::fflush(stdout);
    };
  }
  FG_ASSIGN_OR_RETURN(const FederationResult result,
                      RunFederation(*group, split.sites[group->rank()],
                                    split.test, o.federation));

  if (leader) {
    absl::PrintF("initial model (rank 0's, broadcast): test accuracy %.4f\n",
                 result.initial_accuracy);
    if (!result.local_only_accuracy.empty()) {
      absl::PrintF(
          "local-only baseline (each site alone, %d epochs from the same "
          "initial model):\n",
          o.federation.rounds * o.federation.train.local_epochs);
      int best = 0;
      for (int r = 0; r < group->world_size(); ++r) {
        absl::PrintF("  rank %d %s: %.4f\n", r, group->identities()[r],
                     result.local_only_accuracy[r]);
        if (result.local_only_accuracy[r] > result.local_only_accuracy[best]) {
          best = r;
        }
      }
      absl::PrintF("best single site: %.3f (rank %d, %s)\n",
                   result.local_only_accuracy[best], best,
                   group->identities()[best]);
    }
    absl::PrintF("federated (%d rounds, every rank holds the same model)\n",
                 o.federation.rounds);
    // The plane the rounds ran on (docs/protocol.md, "Data planes"); a
    // failed round would have moved the epoch to the relay.
    absl::PrintF("data plane: %s (%s)\n", DataPlaneName(group->data_plane()),
                 group->data_plane_reason());
  } else {
    absl::PrintF("rank %d %s: %d rounds, test accuracy %.4f\n", group->rank(),
                 group->identities()[group->rank()], o.federation.rounds,
                 result.final_accuracy);
  }
  absl::PrintF("final test accuracy: %.3f\n", result.final_accuracy);
  std::fflush(stdout);
  if (result.final_accuracy < o.min_accuracy) {
    return absl::FailedPreconditionError(
        absl::StrFormat("final test accuracy %.4f is below --min-accuracy %g",
                        result.final_accuracy, o.min_accuracy));
  }
  return absl::OkStatus();
}

// StopOnSignal ends the process at once with 128 + the signal. A handler of
// its own matters as a container's PID 1 (`exec fedavg_site`), which the
// kernel does not let a signal end by its default action: a pod being
// stopped would otherwise wait out its grace period for SIGKILL.
void StopOnSignal(int signal_number) {
  static constexpr char kSaid[] = "fedavg_site: stopped by a signal\n";
  (void)!write(STDERR_FILENO, kSaid, sizeof(kSaid) - 1);
  _exit(128 + signal_number);
}

}  // namespace
}  // namespace fedgather::fedavg

int main(int argc, char** argv) {
  std::signal(SIGTERM, fedgather::fedavg::StopOnSignal);
  std::signal(SIGINT, fedgather::fedavg::StopOnSignal);
  fedgather::fedavg::SiteOptions o;
  fedgather::fedavg::TrainOptions& t = o.federation.train;
  CLI::App app{
      "fedavg_site: one site of the federated digits example (FedAvg over "
      "fedgather)"};
  app.add_option("--server", o.server, "HOST:PORT of fedgather-server")
      ->required();
  app.add_option("--tls-dir", o.tls_dir,
                 "this site's cert.pem, key.pem and ca.pem")
      ->required();
  app.add_option("--data", o.data, "digits.csv.gz")->required();
  app.add_option("--group", o.group, "group to join")->capture_default_str();
  app.add_option("--world-size", o.world_size, "number of sites (1..10)")
      ->capture_default_str();
  app.add_option("--rank", o.rank, "rank to ask for (default: by identity)");
  app.add_option("--aggregate", o.aggregate,
                 "all_reduce, all_gather or both (both checks they agree)")
      ->check(CLI::IsMember({"all_reduce", "all_gather", "both"}))
      ->capture_default_str();
  app.add_option("--rounds", o.federation.rounds, "FedAvg rounds")
      ->capture_default_str();
  app.add_option("--local-epochs", t.local_epochs, "local epochs per round")
      ->capture_default_str();
  app.add_option("--batch-size", t.batch_size, "SGD minibatch size")
      ->capture_default_str();
  app.add_option("--lr", t.learning_rate, "SGD learning rate")
      ->capture_default_str();
  app.add_option("--hidden", t.hidden, "hidden units of the MLP")
      ->capture_default_str();
  app.add_option("--seed", o.federation.seed,
                 "training seed (each site's generator: seed and rank)")
      ->capture_default_str();
  app.add_option("--split-seed", o.split.seed, "seed of the data split")
      ->capture_default_str();
  app.add_option("--home-fraction", o.split.home_fraction,
                 "fraction of a class's examples on its home site")
      ->capture_default_str();
  app.add_option("--test-fraction", o.split.test_fraction,
                 "fraction of each class held out for testing")
      ->capture_default_str();
  bool no_baseline = false;
  app.add_flag("--no-baseline", no_baseline, "skip the local-only baseline");
  app.add_option("--timeout", o.timeout_s,
                 "seconds to wait for the group and for each collective")
      ->capture_default_str();
  app.add_option("--resume-grace", o.resume_grace_s,
                 "seconds a broken session or collective stream is retried "
                 "(a server restarting from its --state-dir; 0: not at all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--min-accuracy", o.min_accuracy,
                 "exit 1 when the final test accuracy is below this")
      ->capture_default_str();
  app.add_option("--peer-listen", o.peer_listen,
                 "HOST:PORT (port 0: any free one): offer a peer endpoint, so "
                 "the rounds may run peer to peer on the direct data plane "
                 "(docs/protocol.md, \"Data planes\")")
      ->envname("FEDGATHER_PEER_LISTEN");
  app.add_option("--peer-advertise", o.peer_advertise,
                 "HOST:PORT the other sites dial (a Service or compose name; "
                 "default: the --peer-listen address)")
      ->envname("FEDGATHER_PEER_ADVERTISE");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  o.federation.local_only_baseline = !no_baseline;
  const absl::Status status = fedgather::fedavg::Run(std::move(o));
  if (!status.ok()) {
    std::cerr << "fedavg_site: " << absl::StatusCodeToString(status.code())
              << ": " << status.message() << std::endl;
    return 1;
  }
  return 0;
}
