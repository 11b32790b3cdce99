#include "common/element_reduction.h"

#include <cmath>
#include <cstring>
#include <type_traits>

namespace fedgather {
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

// Convert writes `count` finished accumulators as the tensor's dtype.
template <typename T>
void Convert(v1::ReduceOp op, const typename T::Accum* acc, int64_t count,
             int ranks, double weight, uint8_t* out) {
  using Acc = typename T::Accum;
  for (int64_t i = 0; i < count; ++i) {
    Acc a = acc[i];
    if (op == v1::MEAN) a = static_cast<Acc>(a / static_cast<Acc>(ranks));
    if (op == v1::WEIGHTED_MEAN) a = static_cast<Acc>(a / weight);
    const typename T::Stored stored = T::Store(a);
    std::memcpy(out + i * sizeof stored, &stored, sizeof stored);
  }
}

// FoldInto folds `count` elements at `data` into the accumulators at
// `accumulator`: the first rank's copy sets them (`first`), later ones
// combine.
struct FoldInto {
  v1::ReduceOp op;
  bool first;
  double weight;
  const uint8_t* data;
  int64_t count;
  uint8_t* accumulator;

  template <typename T>
  void operator()() const {
    using Acc = typename T::Accum;
    Fold<T>(op, first, weight, data, count,
            reinterpret_cast<Acc*>(accumulator));
  }
};

// ConvertFrom converts finished accumulators to the tensor's dtype.
struct ConvertFrom {
  v1::ReduceOp op;
  const uint8_t* accumulator;
  int64_t count;
  int ranks;
  double weight;
  uint8_t* out;

  template <typename T>
  void operator()() const {
    using Acc = typename T::Accum;
    Convert<T>(op, reinterpret_cast<const Acc*>(accumulator), count, ranks,
               weight, out);
  }
};

// AccumulatorSize is sizeof the accumulation type of `dtype`.
struct AccumulatorSize {
  template <typename T>
  size_t operator()() const {
    return sizeof(typename T::Accum);
  }
};

// Calls fn.template operator()<Traits>() for `dtype`'s traits.
template <typename Fn>
auto WithTraits(DType dtype, const Fn& fn) {
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

size_t AccumulatorBytes(DType dtype) {
  return WithTraits(dtype, AccumulatorSize{});
}

void FoldIntoAccumulators(v1::ReduceOp op, DType dtype, bool first,
                          double weight, const uint8_t* data, int64_t count,
                          uint8_t* accumulators) {
  WithTraits(dtype, FoldInto{op, first, weight, data, count, accumulators});
}

void ConvertAccumulators(v1::ReduceOp op, DType dtype,
                         const uint8_t* accumulators, int64_t count, int ranks,
                         double total_weight, uint8_t* out) {
  WithTraits(dtype,
             ConvertFrom{op, accumulators, count, ranks, total_weight, out});
}

}  // namespace fedgather
