// FedAvg over a fedgather group: a small MLP (64 -> hidden -> 10, ReLU)
// trained by plain SGD on one site's digits, and its parameters averaged with
// every other site's each round, weighted by example count, either on the
// server (all_reduce WEIGHTED_MEAN) or locally from an all_gather of every
// site's parameters, or both, checked against each other.
//
// LibTorch stays inside fedavg.cc: this header declares at::Tensor only.
// Randomness (initial weights, batch order) comes from generators this code
// owns, seeded from the options, never from torch's global generator, so
// several sites may train at once on different threads of one process and a
// run is repeatable.
#ifndef FEDGATHER_EXAMPLES_FEDAVG_DIGITS_FEDAVG_H_
#define FEDGATHER_EXAMPLES_FEDAVG_DIGITS_FEDAVG_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/group.h"
#include "examples/fedavg_digits/digits_data.h"

namespace at {
class Tensor;
}  // namespace at

namespace fedgather::fedavg {

struct TrainOptions {
  int hidden = 64;  // hidden units
  int local_epochs = 5;
  int batch_size = 32;
  double learning_rate = 0.1;
};

enum class Aggregation {
  kAllReduce,  // the server computes the weighted mean (all_reduce)
  kAllGather,  // all_gather every site's parameters, average locally (fp64)
  kBoth,       // both; fail if they differ by more than kAggregationTolerance
};

// ParseAggregation reads "all_reduce", "all_gather" or "both";
// INVALID_ARGUMENT otherwise.
absl::StatusOr<Aggregation> ParseAggregation(absl::string_view name);
const char* AggregationName(Aggregation aggregation);

// The largest absolute difference allowed, in kBoth, between the server's
// weighted mean (accumulated in fp32, in arrival order) and the local one
// (fp64) of any parameter.
inline constexpr double kAggregationTolerance = 1e-5;

struct RoundResult {
  int round = 0;              // 1-based
  double test_accuracy = 0;   // of the global model after this round
  double local_accuracy = 0;  // this site's model before averaging
  double max_abs_diff = -1;   // kBoth: |all_reduce - all_gather|; else -1
  double seconds = 0;         // wall time of the round on this site
};

struct FederationOptions {
  TrainOptions train;
  int rounds = 30;
  Aggregation aggregation = Aggregation::kBoth;
  // This site's generators are seeded from seed and the site's rank. Rank
  // 0's initial model is broadcast to every site.
  uint64_t seed = 1;
  // Also train a copy of the initial model on this site's data alone for
  // rounds * local_epochs epochs (the local-only baseline).
  bool local_only_baseline = true;
  CollectiveOptions collective;
  // OnRound, when set, is called on the calling thread after each round.
  std::function<void(const RoundResult&)> on_round;
};

struct FederationResult {
  std::vector<RoundResult> rounds;
  std::vector<int64_t> example_counts;  // per rank
  // Per rank: the test accuracy of the local-only baseline (empty when
  // local_only_baseline is off).
  std::vector<double> local_only_accuracy;
  double initial_accuracy = 0;  // of the broadcast initial model
  double final_accuracy = 0;    // of the global model after the last round
};

// RunFederation runs options.rounds FedAvg rounds on `group`, with this
// site's training set `train` (its weight is train.size()) and the shared
// `test` set, which every site must hold identically. First every site
// shares its example count and its configuration (options, test set
// fingerprint); a mismatch fails with FAILED_PRECONDITION naming the rank and
// both values. Blocks until done; call it from one thread per group, every
// rank with the same options but `on_round`. Errors: the group's (see
// client/group.h); INVALID_ARGUMENT for bad options or an empty training
// set; INTERNAL when, in kBoth, the two averages differ by more than
// kAggregationTolerance (the message names round, tensor and difference),
// or from LibTorch.
absl::StatusOr<FederationResult> RunFederation(
    Group& group, const Dataset& train, const Dataset& test,
    const FederationOptions& options);

// WeightedMean averages gathered parameters (name -> [world, *shape], any
// floating dtype) over dimension 0 with `weights` (one per rank, positive),
// in fp64; returns name -> fp64 [*shape]. INVALID_ARGUMENT on a mismatch.
absl::StatusOr<std::map<std::string, at::Tensor>> WeightedMean(
    const std::map<std::string, at::Tensor>& gathered,
    const std::vector<double>& weights);

// MaxAbsDiff returns the largest absolute element-wise difference between
// two maps with the same names and shapes (compared in fp64);
// INVALID_ARGUMENT naming the first name or shape that differs.
absl::StatusOr<double> MaxAbsDiff(const std::map<std::string, at::Tensor>& a,
                                  const std::map<std::string, at::Tensor>& b);

}  // namespace fedgather::fedavg

#endif  // FEDGATHER_EXAMPLES_FEDAVG_DIGITS_FEDAVG_H_
