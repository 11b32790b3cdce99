// ReduceReference: a small, deliberately plain model of what one ALL_REDUCE
// result element must be, for collective_protocol_fuzzer. It follows
// docs/protocol.md and docs/decisions.md, not server/relay/reducer.cc:
//   - the ranks' copies of an element are folded in the order they arrived
//     (the server "reduces in the order chunks arrive"): the first copy sets
//     the accumulator, each later one combines with it;
//   - accumulators are fp32 for F32/F16/BF16, fp64 for F64 and 64-bit
//     integers for integer dtypes (a SUM wraps as the sum in the tensor's
//     type would);
//   - WEIGHTED_MEAN folds weight * x (rounded to the accumulator type) and
//     divides by the sum of the contributors' weights, added in rank order;
//     MEAN divides by the number of contributors;
//   - MIN/MAX of floating values: a NaN wins, as in torch;
//   - the result goes back to the tensor's dtype rounding to nearest, ties
//     to even (F16 and BF16 found by searching the codes, not by bit
//     tricks), overflowing to infinity.
// Floating results compare exactly, except that any NaN equals any NaN (the
// payload a NaN carries through arithmetic is the hardware's choice).
#ifndef FEDGATHER_TESTS_FUZZ_REDUCE_REFERENCE_H_
#define FEDGATHER_TESTS_FUZZ_REDUCE_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "fedgather/v1/fedgather.pb.h"

namespace fedgather::reduce_reference {

// HalfValue is the value of binary16 code `code` (sign included).
inline double HalfValue(uint16_t code) {
  const int exponent = (code >> 10) & 0x1f;
  const int mantissa = code & 0x3ff;
  double magnitude;
  if (exponent == 0x1f) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else if (exponent == 0) {
    magnitude = std::ldexp(mantissa, -24);
  } else {
    magnitude = std::ldexp(1024 + mantissa, exponent - 25);
  }
  return (code & 0x8000) ? -magnitude : magnitude;
}

inline double Bf16Value(uint16_t code) {
  const uint32_t bits = static_cast<uint32_t>(code) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// NearestCode rounds `x` (not NaN) to the format whose positive finite codes
// 0..max_finite decode (with `value`) to increasing values and whose code
// max_finite + 1 is infinity: to nearest, ties to the even code; past the
// midpoint between the largest finite value and the next power of two, to
// infinity. `sign_bit` is the format's sign bit.
template <typename Decode>
uint16_t NearestCode(double x, uint16_t max_finite, uint16_t sign_bit,
                     Decode value) {
  const uint16_t sign = std::signbit(x) ? sign_bit : 0;
  const double magnitude = std::fabs(x);
  // The value "after" the largest finite one, for rounding to infinity: the
  // next step of the same size.
  const double top = value(max_finite);
  const double beyond = top + (top - value(max_finite - 1));
  // lo: the largest code whose value is <= magnitude.
  uint32_t lo = 0, hi = static_cast<uint32_t>(max_finite) + 1;
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (value(static_cast<uint16_t>(mid)) <= magnitude) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const double below = value(static_cast<uint16_t>(lo));
  if (below == magnitude) return sign | static_cast<uint16_t>(lo);
  const uint32_t up = lo + 1;
  const double above =
      up > max_finite ? beyond : value(static_cast<uint16_t>(up));
  uint32_t code;
  if (magnitude - below < above - magnitude) {
    code = lo;
  } else if (magnitude - below > above - magnitude) {
    code = up;
  } else {
    code = (lo % 2 == 0) ? lo : up;
  }
  return sign | static_cast<uint16_t>(code);  // max_finite + 1 is infinity
}

inline uint16_t HalfCode(float x) {
  if (std::isnan(x)) return 0x7e00;
  return NearestCode(x, 0x7bff, 0x8000, HalfValue);
}

inline uint16_t Bf16Code(float x) {
  if (std::isnan(x)) return 0x7fc0;
  return NearestCode(x, 0x7f7f, 0x8000, Bf16Value);
}

// One copy of an element: the rank that sent it and its bytes.
struct Copy {
  int rank;
  std::string bytes;  // DTypeSize(dtype) bytes, little-endian
};

namespace internal {

inline bool IsFloating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kF16 ||
         dtype == DType::kBF16;
}

inline double LoadFloating(DType dtype, const std::string& bytes) {
  uint16_t code;
  switch (dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, bytes.data(), 4);
      return f;
    }
    case DType::kF64: {
      double d;
      std::memcpy(&d, bytes.data(), 8);
      return d;
    }
    case DType::kF16:
      std::memcpy(&code, bytes.data(), 2);
      return HalfValue(code);
    default:
      std::memcpy(&code, bytes.data(), 2);
      return Bf16Value(code);
  }
}

inline int64_t LoadInteger(DType dtype, const std::string& bytes) {
  const size_t size = DTypeSize(dtype);
  uint64_t raw = 0;
  std::memcpy(&raw, bytes.data(), size);  // little-endian host
  if (dtype == DType::kU8 || dtype == DType::kBool || size == 8) {
    return static_cast<int64_t>(raw);
  }
  const int shift = 64 - static_cast<int>(size) * 8;
  return static_cast<int64_t>(raw << shift) >> shift;  // sign-extend
}

// Fold over the accumulator type Acc (float or double).
template <typename Acc>
std::string FoldFloating(v1::ReduceOp op, DType dtype,
                         const std::vector<Copy>& copies,
                         const std::vector<double>& weight_by_rank,
                         int contributors, double weight_sum) {
  Acc acc = 0;
  for (size_t i = 0; i < copies.size(); ++i) {
    Acc x = static_cast<Acc>(LoadFloating(dtype, copies[i].bytes));
    if (op == v1::WEIGHTED_MEAN) {
      x = static_cast<Acc>(weight_by_rank[copies[i].rank] * x);
    }
    if (i == 0) {
      acc = x;
    } else if (op == v1::MIN || op == v1::MAX) {
      if (!std::isnan(acc) &&
          (std::isnan(x) || (op == v1::MIN ? x < acc : x > acc))) {
        acc = x;
      }
    } else {
      acc = acc + x;
    }
  }
  if (op == v1::MEAN) acc = acc / static_cast<Acc>(contributors);
  if (op == v1::WEIGHTED_MEAN) acc = static_cast<Acc>(acc / weight_sum);
  std::string out(DTypeSize(dtype), '\0');
  if (dtype == DType::kF16 || dtype == DType::kBF16) {
    const uint16_t code = dtype == DType::kF16
                              ? HalfCode(static_cast<float>(acc))
                              : Bf16Code(static_cast<float>(acc));
    std::memcpy(out.data(), &code, 2);
  } else {
    std::memcpy(out.data(), &acc, sizeof acc);
  }
  return out;
}

}  // namespace internal

// Element is the result element for `copies` (every contributor's copy, in
// arrival order). weight_by_rank[r] is rank r's weight; `contributors` and
// `weight_sum` what MEAN and WEIGHTED_MEAN divide by.
inline std::string Element(v1::ReduceOp op, DType dtype,
                           const std::vector<Copy>& copies,
                           const std::vector<double>& weight_by_rank,
                           int contributors, double weight_sum) {
  if (internal::IsFloating(dtype)) {
    return dtype == DType::kF64
               ? internal::FoldFloating<double>(op, dtype, copies,
                                                weight_by_rank, contributors,
                                                weight_sum)
               : internal::FoldFloating<float>(op, dtype, copies,
                                               weight_by_rank, contributors,
                                               weight_sum);
  }
  int64_t acc = 0;
  for (size_t i = 0; i < copies.size(); ++i) {
    const int64_t x = internal::LoadInteger(dtype, copies[i].bytes);
    if (i == 0) {
      acc = x;
    } else if (op == v1::MIN) {
      acc = std::min(acc, x);
    } else if (op == v1::MAX) {
      acc = std::max(acc, x);
    } else {
      acc = static_cast<int64_t>(static_cast<uint64_t>(acc) +
                                 static_cast<uint64_t>(x));
    }
  }
  std::string out(DTypeSize(dtype), '\0');
  std::memcpy(out.data(), &acc, out.size());  // the low bytes: wraps
  return out;
}

// SameElement compares two result elements: bytes, but any NaN equals any
// NaN for floating dtypes.
inline bool SameElement(DType dtype, const std::string& a,
                        const std::string& b) {
  if (a == b) return true;
  return internal::IsFloating(dtype) &&
         std::isnan(internal::LoadFloating(dtype, a)) &&
         std::isnan(internal::LoadFloating(dtype, b));
}

}  // namespace fedgather::reduce_reference

#endif  // FEDGATHER_TESTS_FUZZ_REDUCE_REFERENCE_H_
