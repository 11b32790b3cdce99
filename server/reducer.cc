#include "server/reducer.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace fedgather::server {
namespace {

// IEEE 754 binary16 <-> binary32, round to nearest even.
float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000 | (mantissa << 13);  // inf or NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // zero
  } else {
    // Subnormal: normalize.
    int shift = 0;
    while ((mantissa & 0x400) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3ff;
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t abs = bits & 0x7fffffff;
  if (abs >= 0x7f800000) {  // inf or NaN (keep NaN quiet)
    return sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0);
  }
  if (abs >= 0x477ff000) return sign | 0x7c00;  // rounds past the max: inf
  if (abs < 0x38800000) {                       // a half subnormal or zero
    if (abs < 0x33000000) return sign;          // below half the min: 0
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - exponent;  // 14..24
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t half = ((abs >> 13) - (112u << 10));
  const uint32_t rest = abs & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;
  return sign | static_cast<uint16_t>(half);
}

float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffff) > 0x7f800000) {
    return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  }
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// Element traits: storage type, accumulation type and the conversions.
template <typename Elem, typename Acc>
struct Plain {
  using Stored = Elem;
  using Accum = Acc;
  static Acc Load(Elem e) { return static_cast<Acc>(e); }
  static Elem Store(Acc a) { return static_cast<Elem>(a); }
};
struct Half {
  using Stored = uint16_t;
  using Accum = float;
  static float Load(uint16_t e) { return HalfToFloat(e); }
  static uint16_t Store(float a) { return FloatToHalf(a); }
};
struct BFloat {
  using Stored = uint16_t;
  using Accum = float;
  static float Load(uint16_t e) { return Bf16ToFloat(e); }
  static uint16_t Store(float a) { return FloatToBf16(a); }
};

template <typename T>
void Fold(v1::ReduceOp op, bool first, double weight, const uint8_t* data,
          int64_t count, typename T::Accum* acc) {
  using Acc = typename T::Accum;
  for (int64_t i = 0; i < count; ++i) {
    typename T::Stored stored;
    std::memcpy(&stored, data + i * sizeof stored, sizeof stored);
    Acc x = T::Load(stored);
    if (op == v1::WEIGHTED_MEAN) x = static_cast<Acc>(weight * x);
    if (first) {
      acc[i] = x;
      continue;
    }
    switch (op) {
      case v1::SUM:
      case v1::MEAN:
      case v1::WEIGHTED_MEAN:
        if constexpr (std::is_integral_v<Acc>) {
          // Wrapping, as the sum in a narrower type would.
          acc[i] = static_cast<Acc>(static_cast<uint64_t>(acc[i]) +
                                    static_cast<uint64_t>(x));
        } else {
          acc[i] += x;
        }
        break;
      case v1::MIN:
        if constexpr (std::is_floating_point_v<Acc>) {
          if (std::isnan(acc[i])) break;  // NaN wins, as in torch
          if (std::isnan(x) || x < acc[i]) acc[i] = x;
        } else if (x < acc[i]) {
          acc[i] = x;
        }
        break;
      case v1::MAX:
        if constexpr (std::is_floating_point_v<Acc>) {
          if (std::isnan(acc[i])) break;
          if (std::isnan(x) || x > acc[i]) acc[i] = x;
        } else if (x > acc[i]) {
          acc[i] = x;
        }
        break;
      default:
        break;
    }
  }
}

template <typename T>
std::string Finish(v1::ReduceOp op, const typename T::Accum* acc, int64_t count,
                   int ranks, double weight) {
  using Acc = typename T::Accum;
  std::string out(static_cast<size_t>(count) * sizeof(typename T::Stored),
                  '\0');
  for (int64_t i = 0; i < count; ++i) {
    Acc a = acc[i];
    if (op == v1::MEAN) a = static_cast<Acc>(a / static_cast<Acc>(ranks));
    if (op == v1::WEIGHTED_MEAN) a = static_cast<Acc>(a / weight);
    const typename T::Stored stored = T::Store(a);
    std::memcpy(out.data() + i * sizeof stored, &stored, sizeof stored);
  }
  return out;
}

// FoldInto folds `count` elements at `data` into `accumulator`, sizing it
// first for the first rank.
struct FoldInto {
  v1::ReduceOp op;
  bool first;
  double weight;
  const uint8_t* data;
  int64_t count;
  std::vector<uint8_t>* accumulator;

  template <typename T>
  std::string operator()() const {
    using Acc = typename T::Accum;
    if (first) accumulator->resize(static_cast<size_t>(count) * sizeof(Acc));
    Fold<T>(op, first, weight, data, count,
            reinterpret_cast<Acc*>(accumulator->data()));
    return std::string();
  }
};

// FinishFrom converts a finished accumulator to the tensor's dtype.
struct FinishFrom {
  v1::ReduceOp op;
  const std::vector<uint8_t>* accumulator;
  int ranks;
  double weight;

  template <typename T>
  std::string operator()() const {
    using Acc = typename T::Accum;
    return Finish<T>(op, reinterpret_cast<const Acc*>(accumulator->data()),
                     static_cast<int64_t>(accumulator->size() / sizeof(Acc)),
                     ranks, weight);
  }
};

// Calls fn.template operator()<Traits>() for `dtype`'s traits.
template <typename Fn>
std::string WithTraits(DType dtype, const Fn& fn) {
  switch (dtype) {
    case DType::kF32:
      return fn.template operator()<Plain<float, float>>();
    case DType::kF64:
      return fn.template operator()<Plain<double, double>>();
    case DType::kF16:
      return fn.template operator()<Half>();
    case DType::kBF16:
      return fn.template operator()<BFloat>();
    case DType::kI64:
      return fn.template operator()<Plain<int64_t, int64_t>>();
    case DType::kI32:
      return fn.template operator()<Plain<int32_t, int64_t>>();
    case DType::kI16:
      return fn.template operator()<Plain<int16_t, int64_t>>();
    case DType::kI8:
      return fn.template operator()<Plain<int8_t, int64_t>>();
    case DType::kU8:
    case DType::kBool:
      return fn.template operator()<Plain<uint8_t, int64_t>>();
  }
  return fn.template operator()<Plain<uint8_t, int64_t>>();
}

}  // namespace

std::string ReduceOpName(v1::ReduceOp op) { return v1::ReduceOp_Name(op); }

absl::StatusOr<std::unique_ptr<Reducer>> Reducer::Create(
    v1::ReduceOp op, const Fingerprint& fingerprint, int world_size) {
  if (absl::Status reducible = CheckReducible(op, fingerprint);
      !reducible.ok()) {
    return reducible;
  }
  return std::unique_ptr<Reducer>(new Reducer(op, fingerprint, world_size));
}

std::optional<std::string> Reducer::Add(int rank, double weight, int tensor,
                                        int64_t offset, const uint8_t* data,
                                        int64_t size) {
  const DType dtype = fingerprint_[tensor].dtype;
  const int64_t count = size / static_cast<int64_t>(DTypeSize(dtype));
  Partial& partial = partials_[{tensor, offset}];
  const bool first = partial.count == 0;
  WithTraits(dtype,
             FoldInto{op_, first, weight, data, count, &partial.accumulator});
  if (first) held_bytes_ += static_cast<int64_t>(partial.accumulator.size());
  ++partial.count;
  partial.weight += weight;
  if (partial.count < contributors_) return std::nullopt;
  return Finish(tensor, offset, partial);
}

std::string Reducer::Finish(int tensor, int64_t offset, Partial& partial) {
  std::string finished = WithTraits(
      fingerprint_[tensor].dtype,
      FinishFrom{op_, &partial.accumulator, partial.count, partial.weight});
  held_bytes_ -= static_cast<int64_t>(partial.accumulator.size());
  partials_.erase({tensor, offset});
  return finished;
}

std::vector<Reducer::FinishedChunk> Reducer::CloseContributors(
    int contributors) {
  contributors_ = contributors;
  std::vector<FinishedChunk> finished;
  for (auto it = partials_.begin(); it != partials_.end();) {
    const auto [tensor, offset] = (it++)->first;  // Finish erases the entry
    Partial& partial = partials_.at({tensor, offset});
    if (partial.count < contributors_) continue;
    finished.push_back(
        FinishedChunk{tensor, offset, Finish(tensor, offset, partial)});
  }
  return finished;
}

}  // namespace fedgather::server
