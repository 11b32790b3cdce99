#include "tests/soak/round_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/tensor_spec.h"
#include "tests/e2e/test_cluster.h"

namespace fedgather::testing {
namespace {

// SplitMix64: decorrelates the seeds of neighbouring rounds and ranks.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t SeedOf(uint64_t seed, int round, int rank, int tensor) {
  return Mix(Mix(Mix(Mix(seed) ^ static_cast<uint64_t>(round)) ^
                 static_cast<uint64_t>(rank)) ^
             static_cast<uint64_t>(tensor));
}

class Draw {
 public:
  explicit Draw(uint64_t seed) : engine_(seed) {}

  int64_t Uniform(int64_t lo, int64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<int64_t>(lo, hi)(engine_);
  }
  double Fraction() {
    return std::uniform_real_distribution<double>(0, 1)(engine_);
  }
  // LogUniform draws from [1, most] with log-uniform density: as many
  // rounds of 1-2 bytes as of 512 KiB-1 MiB.
  int64_t LogUniform(int64_t most) {
    const double x = std::exp(Fraction() * std::log(static_cast<double>(most)));
    return std::clamp<int64_t>(static_cast<int64_t>(x), 1, most);
  }
  template <typename T>
  const T& Pick(const std::vector<T>& from) {
    return from[Uniform(0, static_cast<int64_t>(from.size()) - 1)];
  }

 private:
  std::mt19937_64 engine_;
};

// A shape of `count` elements (rounded down to fit) of 1 to 3 dimensions.
std::vector<int64_t> ShapeOf(int64_t count, Draw& draw) {
  switch (draw.Uniform(1, 3)) {
    case 1:
      return {count};
    case 2: {
      const int64_t rows = draw.Uniform(1, std::min<int64_t>(count, 64));
      return {rows, count / rows};
    }
    default: {
      const int64_t a = draw.Uniform(1, std::min<int64_t>(count, 8));
      const int64_t b = draw.Uniform(1, std::max<int64_t>(1, count / a / 8));
      return {a, b, std::max<int64_t>(1, count / a / b)};
    }
  }
}

}  // namespace

const char* SoakOpName(SoakOp op) {
  switch (op) {
    case SoakOp::kAllGather:
      return "all_gather";
    case SoakOp::kAllGatherV:
      return "all_gather_v";
    case SoakOp::kAllGatherBytes:
      return "all_gather_bytes";
    case SoakOp::kAllReduce:
      return "all_reduce";
  }
  return "?";
}

RoundPlan PlanRound(const PlanOptions& options, int round) {
  Draw draw(SeedOf(options.seed, round, -1, -1));
  const int world = options.world;
  RoundPlan plan;
  const int64_t op = draw.Uniform(0, 99);
  plan.op = op < 65   ? SoakOp::kAllGather
            : op < 80 ? SoakOp::kAllGatherV
            : op < 90 ? SoakOp::kAllReduce
                      : SoakOp::kAllGatherBytes;
  static const std::vector<DType> kGatherTypes = {
      DType::kU8,  DType::kI8,  DType::kI16, DType::kF16, DType::kBF16,
      DType::kF32, DType::kI32, DType::kF64, DType::kI64};
  switch (plan.op) {
    case SoakOp::kAllGather: {
      const int tensors = static_cast<int>(draw.Uniform(1, 3));
      for (int t = 0; t < tensors; ++t) {
        SoakTensor tensor{absl::StrCat("t", t), draw.Pick(kGatherTypes), {}};
        const int64_t bytes = draw.LogUniform(options.max_bytes / tensors);
        const int64_t count = std::max<int64_t>(
            1, bytes / static_cast<int64_t>(DTypeSize(tensor.dtype)));
        tensor.shapes.assign(world, ShapeOf(count, draw));
        plan.tensors.push_back(std::move(tensor));
      }
      break;
    }
    case SoakOp::kAllGatherV: {
      // Up to 16 rows per rank of a tail that fits max_bytes / 16 / tensors.
      const int tensors = static_cast<int>(draw.Uniform(1, 2));
      for (int t = 0; t < tensors; ++t) {
        SoakTensor tensor{absl::StrCat("v", t), draw.Pick(kGatherTypes), {}};
        const int64_t bytes = draw.LogUniform(options.max_bytes / tensors / 16);
        const int64_t cols = std::max<int64_t>(
            1, bytes / static_cast<int64_t>(DTypeSize(tensor.dtype)));
        const bool two = cols >= 2 && draw.Uniform(0, 1) == 1;
        for (int r = 0; r < world; ++r) {
          const int64_t rows = draw.Uniform(1, 16);
          tensor.shapes.push_back(two ? std::vector<int64_t>{rows, 2, cols / 2}
                                      : std::vector<int64_t>{rows, cols});
        }
        plan.tensors.push_back(std::move(tensor));
      }
      break;
    }
    case SoakOp::kAllReduce: {
      const int tensors = static_cast<int>(draw.Uniform(1, 2));
      for (int t = 0; t < tensors; ++t) {
        SoakTensor tensor{absl::StrCat("g", t), DType::kI64, {}};
        const int64_t count = std::max<int64_t>(
            1, draw.LogUniform(options.max_bytes / tensors) / 8);
        tensor.shapes.assign(world, ShapeOf(count, draw));
        plan.tensors.push_back(std::move(tensor));
      }
      break;
    }
    case SoakOp::kAllGatherBytes: {
      SoakTensor tensor{"bytes", DType::kU8, {}};
      for (int r = 0; r < world; ++r) {
        // One in twenty is empty: any length is allowed, zero included.
        const int64_t length =
            draw.Uniform(0, 19) == 0 ? 0 : draw.LogUniform(64 << 10);
        tensor.shapes.push_back({length});
      }
      plan.tensors.push_back(std::move(tensor));
      break;
    }
  }
  if (draw.Uniform(0, 99) < options.cut_percent) {
    plan.victim = static_cast<int>(draw.Uniform(0, world - 1));
    const bool upload = draw.Uniform(0, 1) == 0;
    plan.cut = (upload && options.upload_cuts) || !options.download_cuts
                   ? CutKind::kUpload
                   : CutKind::kDownload;
    plan.cut_fraction = draw.Fraction();
  }
  for (int r = 0; r < world; ++r) {
    // Half the ranks use the server's limit; the others a size of their
    // own, log-uniform down to a 512th of their upload (so that a round
    // stays a few thousand frames), odd half the time.
    Draw chunk(SeedOf(options.seed, round, r, -2));
    int64_t bytes = 0;
    if (chunk.Uniform(0, 1) == 1) {
      const int64_t upload = UploadBytes(plan, r);
      const int64_t least = std::max<int64_t>(1, upload / 512);
      bytes = least + chunk.LogUniform(std::max<int64_t>(1, upload)) - 1;
      bytes = std::min<int64_t>(bytes, int64_t{1} << 20);
      if (chunk.Uniform(0, 1) == 1) bytes |= 1;
    }
    plan.chunk_bytes.push_back(bytes);
  }
  return plan;
}

int64_t UploadBytes(const RoundPlan& plan, int rank) {
  int64_t bytes = 0;
  for (const SoakTensor& tensor : plan.tensors) {
    bytes += NumElements(tensor.shapes[rank]).value() *
             static_cast<int64_t>(DTypeSize(tensor.dtype));
  }
  return bytes;
}

int64_t DownloadBytes(const RoundPlan& plan, int rank) {
  if (plan.op == SoakOp::kAllReduce) return UploadBytes(plan, rank);
  int64_t bytes = 0;
  const int world = static_cast<int>(plan.tensors[0].shapes.size());
  for (int r = 0; r < world; ++r) {
    if (r != rank) bytes += UploadBytes(plan, r);
  }
  return bytes;
}

RoundInputs MakeRoundInputs(const PlanOptions& options, int round,
                            const RoundPlan& plan) {
  const int world = options.world;
  const int tensors = static_cast<int>(plan.tensors.size());
  RoundInputs inputs;
  inputs.bytes.resize(world);
  for (int r = 0; r < world; ++r) {
    for (int t = 0; t < tensors; ++t) {
      const SoakTensor& tensor = plan.tensors[t];
      const int64_t count = NumElements(tensor.shapes[r]).value();
      const uint32_t seed =
          static_cast<uint32_t>(SeedOf(options.seed, round, r, t));
      if (plan.op != SoakOp::kAllReduce) {
        inputs.bytes[r].push_back(RandomBytes(
            count * static_cast<int64_t>(DTypeSize(tensor.dtype)), seed));
        continue;
      }
      // Values in int32 range: a sum of eight cannot overflow int64.
      std::mt19937 engine(seed);
      std::vector<int64_t> values(count);
      for (int64_t& v : values) v = static_cast<int32_t>(engine());
      std::vector<uint8_t> bytes(count * sizeof(int64_t));
      std::memcpy(bytes.data(), values.data(), bytes.size());
      inputs.bytes[r].push_back(std::move(bytes));
      if (r == 0) inputs.sums.emplace_back(count, 0);
      for (int64_t i = 0; i < count; ++i) inputs.sums[t][i] += values[i];
    }
  }
  return inputs;
}

std::shared_ptr<const RoundInputs> SharedRoundInputs::Get(
    int round, const RoundPlan& plan) {
  absl::MutexLock lock(&mu_);
  Entry& entry = rounds_[round];
  if (entry.inputs == nullptr) {
    entry.inputs = std::make_shared<const RoundInputs>(
        MakeRoundInputs(options_, round, plan));
  }
  return entry.inputs;
}

void SharedRoundInputs::Done(int round) {
  absl::MutexLock lock(&mu_);
  auto it = rounds_.find(round);
  if (it != rounds_.end() && ++it->second.done == options_.world) {
    rounds_.erase(it);
  }
}

}  // namespace fedgather::testing
