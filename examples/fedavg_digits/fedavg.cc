// FedAvg on LibTorch (ATen with autograd; no torch::nn, which costs twice
// the compile time for a two-layer model). The only translation unit of the
// example that includes LibTorch; its exceptions become a Status here.
#include "examples/fedavg_digits/fedavg.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <exception>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/torch/torch_collectives.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace fedgather::fedavg {
namespace {

// Params maps each parameter's name to its tensor (contiguous fp32 leaves
// that require grad), in the order the map sorts them.
using Params = std::map<std::string, at::Tensor>;

// Examples as tensors: x [n, 64] fp32, y [n] int64.
struct Examples {
  at::Tensor x;
  at::Tensor y;
};

Examples ToTensors(const Dataset& data) {
  const int64_t n = data.size();
  return {
      at::from_blob(const_cast<float*>(data.pixels.data()), {n, kPixels},
                    at::kFloat)
          .clone(),
      at::from_blob(const_cast<int64_t*>(data.labels.data()), {n}, at::kLong)
          .clone()};
}

// MakeGenerator returns a CPU generator of its own, so that sites on
// different threads never share torch's global one.
at::Generator MakeGenerator(uint64_t seed) {
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

// InitParams draws weights and biases uniformly from +-1/sqrt(fan_in), as
// torch.nn.Linear does by default.
Params InitParams(int hidden, at::Generator& gen) {
  auto uniform = [&](at::IntArrayRef shape, int64_t fan_in) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    return at::empty(shape, at::kFloat).uniform_(-bound, bound, gen);
  };
  Params p;
  p["fc1.weight"] = uniform({hidden, kPixels}, kPixels);
  p["fc1.bias"] = uniform({hidden}, kPixels);
  p["fc2.weight"] = uniform({kClasses, hidden}, hidden);
  p["fc2.bias"] = uniform({kClasses}, hidden);
  for (auto& [name, t] : p) t.set_requires_grad(true);
  return p;
}

Params CloneParams(const Params& p) {
  Params copy;
  for (const auto& [name, t] : p) {
    copy[name] = t.detach().clone().set_requires_grad(true);
  }
  return copy;
}

at::Tensor Forward(const Params& p, const at::Tensor& x) {
  at::Tensor h = at::relu(at::linear(x, p.at("fc1.weight"), p.at("fc1.bias")));
  return at::linear(h, p.at("fc2.weight"), p.at("fc2.bias"));
}

// Train runs `epochs` epochs of minibatch SGD on `data`, with the batch
// order drawn from `gen`.
void Train(Params& p, const Examples& data, const TrainOptions& options,
           int epochs, at::Generator& gen) {
  const int64_t n = data.x.size(0);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    const at::Tensor order = at::randperm(n, gen, at::kLong);
    for (int64_t start = 0; start < n; start += options.batch_size) {
      const at::Tensor batch = order.slice(
          0, start, std::min<int64_t>(start + options.batch_size, n));
      const at::Tensor logits = Forward(p, data.x.index_select(0, batch));
      const at::Tensor loss = at::nll_loss(at::log_softmax(logits, 1),
                                           data.y.index_select(0, batch));
      loss.backward();
      at::NoGradGuard no_grad;
      for (auto& [name, t] : p) {
        t.sub_(t.grad(), options.learning_rate);
        t.mutable_grad() = at::Tensor();
      }
    }
  }
}

double Accuracy(const Params& p, const Examples& data) {
  at::NoGradGuard no_grad;
  const at::Tensor predicted = Forward(p, data.x).argmax(1);
  return predicted.eq(data.y).to(at::kDouble).mean().item<double>();
}

// Detached views of the parameters, which is what the collectives send.
Params Detached(const Params& p) {
  Params out;
  for (const auto& [name, t] : p) out[name] = t.detach();
  return out;
}

// Assign copies `values` (any floating dtype) into the parameters.
void Assign(Params& p, const Params& values) {
  at::NoGradGuard no_grad;
  for (auto& [name, t] : p) t.copy_(values.at(name));
}

std::string ModelDigest(const Params& p) {
  Sha256 sha;
  for (const auto& [name, t] : p) {
    sha.Update(name.data(), name.size());
    sha.Update(t.data_ptr(), t.numel() * t.element_size());
  }
  return DigestToHex(sha.Finish());
}

std::string ConfigString(const FederationOptions& o, const Dataset& test) {
  return absl::StrCat(
      "hidden=", o.train.hidden, " epochs=", o.train.local_epochs,
      " batch=", o.train.batch_size,
      " lr=", absl::StrFormat("%.10g", o.train.learning_rate),
      " rounds=", o.rounds, " aggregate=", AggregationName(o.aggregation),
      " seed=", o.seed, " baseline=", o.local_only_baseline ? 1 : 0,
      " test=", test.size(), ":", test.Fingerprint());
}

absl::Status CheckOptions(const Dataset& train, const Dataset& test,
                          const FederationOptions& o) {
  if (o.rounds < 1 || o.train.hidden < 1 || o.train.local_epochs < 1 ||
      o.train.batch_size < 1 || !(o.train.learning_rate > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rounds, hidden, local epochs, batch size and learning rate must be "
        "positive; got ",
        o.rounds, ", ", o.train.hidden, ", ", o.train.local_epochs, ", ",
        o.train.batch_size, ", ", o.train.learning_rate));
  }
  if (train.size() == 0 || test.size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("empty data: ", train.size(), " training and ",
                     test.size(), " test examples"));
  }
  return absl::OkStatus();
}

// ExchangeHello shares every rank's example count and configuration and
// returns the counts in rank order.
absl::StatusOr<std::vector<int64_t>> ExchangeHello(
    Group& group, int64_t count, const std::string& config,
    const CollectiveOptions& options) {
  FG_ASSIGN_OR_RETURN(
      std::vector<std::string> hellos,
      group.AllGatherBytes(absl::StrCat(count, " ", config), options));
  std::vector<int64_t> counts;
  for (size_t r = 0; r < hellos.size(); ++r) {
    const std::pair<std::string, std::string> parts =
        absl::StrSplit(hellos[r], absl::MaxSplits(' ', 1));
    int64_t theirs = 0;
    if (!absl::SimpleAtoi(parts.first, &theirs) || theirs <= 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", r, " (", group.identities()[r],
          ") declared no usable example count: '", hellos[r], "'"));
    }
    if (parts.second != config) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", r, " (", group.identities()[r], ") runs with '",
          parts.second, "' but rank ", group.rank(), " with '", config, "'"));
    }
    counts.push_back(theirs);
  }
  return counts;
}

// Aggregate replaces `p` with the example-weighted mean of every rank's
// parameters; returns the max |all_reduce - all_gather| in kBoth, else -1.
absl::StatusOr<double> Aggregate(Group& group, Params& p, int64_t count,
                                 const std::vector<double>& weights, int round,
                                 const FederationOptions& o) {
  const Params mine = Detached(p);
  Params reduced;
  if (o.aggregation != Aggregation::kAllGather) {
    FG_ASSIGN_OR_RETURN(reduced, client::torch::AllReduce(
                                     group, mine, v1::WEIGHTED_MEAN,
                                     static_cast<double>(count), o.collective));
  }
  double diff = -1;
  if (o.aggregation != Aggregation::kAllReduce) {
    FG_ASSIGN_OR_RETURN(const Params gathered,
                        client::torch::AllGather(group, mine, o.collective));
    FG_ASSIGN_OR_RETURN(const Params mean, WeightedMean(gathered, weights));
    if (o.aggregation == Aggregation::kAllGather) {
      reduced = mean;
    } else {
      for (const auto& [name, t] : mean) {
        FG_ASSIGN_OR_RETURN(
            const double d,
            MaxAbsDiff({{name, reduced.at(name)}}, {{name, t}}));
        if (!(d <= kAggregationTolerance)) {  // NaN fails too
          return absl::InternalError(absl::StrFormat(
              "round %d, rank %d: the all_reduce and all_gather averages of "
              "'%s' differ by up to %.3g (tolerance %.0e)",
              round, group.rank(), name, d, kAggregationTolerance));
        }
        diff = std::max(diff, d);
      }
    }
  }
  Assign(p, reduced);
  return diff;
}

absl::StatusOr<FederationResult> RunFederationOrThrow(
    Group& group, const Dataset& train, const Dataset& test,
    const FederationOptions& o) {
  FG_RETURN_IF_ERROR(CheckOptions(train, test, o));
  FederationResult result;
  FG_ASSIGN_OR_RETURN(
      result.example_counts,
      ExchangeHello(group, train.size(), ConfigString(o, test), o.collective));
  const std::vector<double> weights(result.example_counts.begin(),
                                    result.example_counts.end());
  const Examples train_set = ToTensors(train);
  const Examples test_set = ToTensors(test);

  // Every site starts from rank 0's initial model.
  const uint64_t site_seed =
      o.seed * 1000003 + static_cast<uint64_t>(group.rank());
  at::Generator gen = MakeGenerator(site_seed);
  Params p = InitParams(o.train.hidden, gen);
  for (auto& [name, t] : p) {
    at::Tensor data = t.detach();
    FG_RETURN_IF_ERROR(
        client::torch::Broadcast(group, data, /*root=*/0, o.collective));
  }
  result.initial_accuracy = Accuracy(p, test_set);

  double local_only = -1;
  if (o.local_only_baseline) {
    Params alone = CloneParams(p);
    at::Generator alone_gen = MakeGenerator(site_seed ^ 0x5eed5eed5eedULL);
    Train(alone, train_set, o.train, o.rounds * o.train.local_epochs,
          alone_gen);
    local_only = Accuracy(alone, test_set);
  }

  for (int round = 1; round <= o.rounds; ++round) {
    const absl::Time start = absl::Now();
    RoundResult r;
    r.round = round;
    Train(p, train_set, o.train, o.train.local_epochs, gen);
    r.local_accuracy = Accuracy(p, test_set);
    FG_ASSIGN_OR_RETURN(r.max_abs_diff,
                        Aggregate(group, p, train.size(), weights, round, o));
    r.test_accuracy = Accuracy(p, test_set);
    r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    result.rounds.push_back(r);
    if (o.on_round) o.on_round(r);
  }
  result.final_accuracy = result.rounds.back().test_accuracy;

  // Every rank must hold the same global model; share the baselines too.
  const std::string digest = ModelDigest(p);
  FG_ASSIGN_OR_RETURN(
      std::vector<std::string> finals,
      group.AllGatherBytes(
          absl::StrCat(digest, " ", absl::StrFormat("%.17g", local_only)),
          o.collective));
  for (size_t r = 0; r < finals.size(); ++r) {
    const std::pair<std::string, std::string> parts =
        absl::StrSplit(finals[r], absl::MaxSplits(' ', 1));
    if (parts.first != digest) {
      return absl::InternalError(
          absl::StrCat("after ", o.rounds, " rounds rank ", r, " (",
                       group.identities()[r], ") holds model ", parts.first,
                       " but rank ", group.rank(), " holds ", digest));
    }
    double accuracy = 0;
    if (!absl::SimpleAtod(parts.second, &accuracy)) {
      return absl::InternalError(absl::StrCat(
          "rank ", r, " sent a malformed baseline: '", finals[r], "'"));
    }
    if (o.local_only_baseline) result.local_only_accuracy.push_back(accuracy);
  }
  return result;
}

}  // namespace

absl::StatusOr<Aggregation> ParseAggregation(absl::string_view name) {
  if (name == "all_reduce") return Aggregation::kAllReduce;
  if (name == "all_gather") return Aggregation::kAllGather;
  if (name == "both") return Aggregation::kBoth;
  return absl::InvalidArgumentError(absl::StrCat(
      "aggregation '", name, "': want all_reduce, all_gather or both"));
}

const char* AggregationName(Aggregation aggregation) {
  switch (aggregation) {
    case Aggregation::kAllReduce:
      return "all_reduce";
    case Aggregation::kAllGather:
      return "all_gather";
    case Aggregation::kBoth:
      return "both";
  }
  return "?";
}

absl::StatusOr<FederationResult> RunFederation(
    Group& group, const Dataset& train, const Dataset& test,
    const FederationOptions& options) {
  try {
    return RunFederationOrThrow(group, train, test, options);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("LibTorch: ", e.what()));
  }
}

absl::StatusOr<std::map<std::string, at::Tensor>> WeightedMean(
    const std::map<std::string, at::Tensor>& gathered,
    const std::vector<double>& weights) {
  try {
    if (weights.empty() || std::any_of(weights.begin(), weights.end(),
                                       [](double w) { return !(w > 0); })) {
      return absl::InvalidArgumentError("weights must be positive, one a rank");
    }
    const auto world = static_cast<int64_t>(weights.size());
    const at::Tensor w = at::tensor(weights, at::kDouble);
    std::map<std::string, at::Tensor> mean;
    for (const auto& [name, t] : gathered) {
      if (t.dim() < 1 || t.size(0) != world || !t.is_floating_point()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'", name, "' is not a floating [", world, ", ...] tensor"));
      }
      std::vector<int64_t> shape(t.dim(), 1);
      shape[0] = world;
      mean[name] = (t.to(at::kDouble) * w.reshape(shape)).sum(0) / w.sum();
    }
    return mean;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("LibTorch: ", e.what()));
  }
}

absl::StatusOr<double> MaxAbsDiff(const std::map<std::string, at::Tensor>& a,
                                  const std::map<std::string, at::Tensor>& b) {
  try {
    if (a.size() != b.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(a.size(), " tensors against ", b.size()));
    }
    double diff = 0;
    for (const auto& [name, t] : a) {
      auto it = b.find(name);
      if (it == b.end() || !t.sizes().equals(it->second.sizes())) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", name, "' is missing or differs in shape"));
      }
      if (t.numel() == 0) continue;
      diff = std::max(diff, (t.to(at::kDouble) - it->second.to(at::kDouble))
                                .abs()
                                .max()
                                .item<double>());
    }
    return diff;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("LibTorch: ", e.what()));
  }
}

}  // namespace fedgather::fedavg
