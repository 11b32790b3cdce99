#include "server/relay/reducer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

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

std::string ReduceOpName(v1::ReduceOp op) { return v1::ReduceOp_Name(op); }

absl::StatusOr<std::unique_ptr<Reducer>> Reducer::Create(
    v1::ReduceOp op, const Fingerprint& fingerprint, int world_size,
    int64_t max_result_bytes) {
  if (absl::Status reducible = CheckReducible(op, fingerprint);
      !reducible.ok()) {
    return reducible;
  }
  return std::unique_ptr<Reducer>(
      new Reducer(op, fingerprint, world_size, max_result_bytes));
}

Reducer::Reducer(v1::ReduceOp op, const Fingerprint& fingerprint,
                 int world_size, int64_t max_result_bytes)
    : op_(op),
      fingerprint_(fingerprint),
      max_result_bytes_(max_result_bytes),
      cursors_(static_cast<size_t>(world_size)),
      windows_(fingerprint.size()) {
  elements_.reserve(fingerprint.size());
  // A validated fingerprint has representable sizes.
  for (const TensorSpec& spec : fingerprint) {
    elements_.push_back(NumElements(spec.shape).value());
  }
}

absl::Status Reducer::CheckNext(int rank, const Cursor& cursor, int tensor,
                                int64_t offset, int64_t size) const {
  const auto refuse = [&](absl::string_view why) {
    return absl::InternalError(absl::StrCat(
        "the reduction got rank ", rank, "'s chunk of ", size,
        " bytes for tensor ", tensor, " at offset ", offset, ", which ", why));
  };
  if (tensor < 0 || tensor >= static_cast<int>(fingerprint_.size())) {
    return refuse("does not exist");
  }
  if (!cursor.contributor) return refuse("is not a contributor");
  const auto bytes_of = [&](int t) {
    return elements_[t] *
           static_cast<int64_t>(DTypeSize(fingerprint_[t].dtype));
  };
  if (size <= 0 || offset < 0 || size > bytes_of(tensor) - offset) {
    return refuse("does not lie within the tensor");
  }
  if (tensor == cursor.tensor) {
    if (offset != cursor.bytes) return refuse("is not its next chunk");
    return absl::OkStatus();
  }
  if (tensor < cursor.tensor || offset != 0 ||
      cursor.bytes != bytes_of(cursor.tensor)) {
    return refuse("is not its next chunk");
  }
  for (int t = cursor.tensor + 1; t < tensor; ++t) {
    if (elements_[t] != 0) return refuse("skips a tensor");
  }
  return absl::OkStatus();
}

absl::StatusOr<Reducer::Added> Reducer::Add(int rank, double weight, int tensor,
                                            int64_t offset, const uint8_t* data,
                                            int64_t size) {
  if (rank < 0 || rank >= static_cast<int>(cursors_.size())) {
    return absl::InternalError(
        absl::StrCat("the reduction got a chunk from unknown rank ", rank));
  }
  Cursor& cursor = cursors_[rank];
  FG_RETURN_IF_ERROR(CheckNext(rank, cursor, tensor, offset, size));
  if (tensor != cursor.tensor) {  // the previous tensor is complete
    cursor.tensor = tensor;
    cursor.bytes = 0;
  }
  cursor.weight = weight;
  const int64_t end = offset + size;  // the rank's bytes of the tensor after
  const int64_t element_size =
      static_cast<int64_t>(DTypeSize(fingerprint_[tensor].dtype));
  Added added;
  int64_t next = cursor.bytes / element_size;  // its next element
  held_bytes_ -= static_cast<int64_t>(cursor.carry.size());
  if (!cursor.carry.empty()) {  // complete the element cut in two
    const int64_t take = std::min<int64_t>(
        element_size - static_cast<int64_t>(cursor.carry.size()), size);
    cursor.carry.append(reinterpret_cast<const char*>(data),
                        static_cast<size_t>(take));
    data += take;
    size -= take;
    if (static_cast<int64_t>(cursor.carry.size()) == element_size) {
      added.ahead |=
          FoldElements(tensor, next++, 1, weight,
                       reinterpret_cast<const uint8_t*>(cursor.carry.data()));
      cursor.carry.clear();
    }
  }
  const int64_t whole = size / element_size;
  if (whole > 0) {
    added.ahead |= FoldElements(tensor, next, whole, weight, data);
    data += whole * element_size;
    size -= whole * element_size;
  }
  if (size > 0) {
    cursor.carry.assign(reinterpret_cast<const char*>(data),
                        static_cast<size_t>(size));
  }
  held_bytes_ += static_cast<int64_t>(cursor.carry.size());
  cursor.bytes = end;
  Emit(tensor, &added.finished);
  return added;
}

uint8_t* Reducer::Accumulator(int tensor, int64_t element, int64_t* run) {
  Window& window = windows_[tensor];
  const size_t accumulator_size =
      WithTraits(fingerprint_[tensor].dtype, AccumulatorSize{});
  const int64_t block = element / kBlockElements;
  const int64_t within = element % kBlockElements;
  std::vector<uint8_t>& storage =
      window.blocks[static_cast<size_t>(block - window.first_block)];
  *run = static_cast<int64_t>(storage.size() / accumulator_size) - within;
  return storage.data() + static_cast<size_t>(within) * accumulator_size;
}

bool Reducer::FoldElements(int tensor, int64_t first, int64_t count,
                           double weight, const uint8_t* data) {
  Window& window = windows_[tensor];
  const DType dtype = fingerprint_[tensor].dtype;
  const int64_t element_size = static_cast<int64_t>(DTypeSize(dtype));
  const int64_t end = first + count;
  const bool grows = end > window.frontier;
  // Blocks up to `end`; a tensor's last block holds only its own elements.
  const size_t accumulator_size = WithTraits(dtype, AccumulatorSize{});
  while ((window.first_block + static_cast<int64_t>(window.blocks.size())) *
             kBlockElements <
         end) {
    const int64_t block_start =
        (window.first_block + static_cast<int64_t>(window.blocks.size())) *
        kBlockElements;
    const int64_t elements =
        std::min(kBlockElements, elements_[tensor] - block_start);
    window.blocks.emplace_back(static_cast<size_t>(elements) *
                               accumulator_size);
    held_bytes_ += static_cast<int64_t>(window.blocks.back().size());
  }
  // Elements before the frontier were folded by another rank already.
  for (int64_t element = first; element < end;) {
    int64_t run = 0;
    uint8_t* accumulator = Accumulator(tensor, element, &run);
    const bool fresh = element >= window.frontier;
    const int64_t limit = fresh ? end : std::min(end, window.frontier);
    run = std::min(run, limit - element);
    WithTraits(dtype, FoldInto{op_, fresh, weight,
                               data + (element - first) * element_size, run,
                               accumulator});
    element += run;
  }
  window.frontier = std::max(window.frontier, end);
  return grows;
}

int64_t Reducer::FoldedBy(const Cursor& cursor, int tensor) const {
  if (cursor.tensor > tensor) return elements_[tensor];
  if (cursor.tensor < tensor) return 0;
  return cursor.bytes /
         static_cast<int64_t>(DTypeSize(fingerprint_[tensor].dtype));
}

void Reducer::Emit(int tensor, std::vector<FinishedChunk>* out) {
  Window& window = windows_[tensor];
  const DType dtype = fingerprint_[tensor].dtype;
  const int64_t element_size = static_cast<int64_t>(DTypeSize(dtype));
  const int64_t total = elements_[tensor];
  int64_t finished = total;
  int ranks = 0;
  double weight = 0;
  for (const Cursor& cursor : cursors_) {
    if (!cursor.contributor) continue;
    finished = std::min(finished, FoldedBy(cursor, tensor));
    ++ranks;
    weight += cursor.weight;
  }
  if (ranks == 0) return;
  const int64_t per_chunk =
      std::max<int64_t>(1, max_result_bytes_ / element_size);
  while (finished - window.emitted >= per_chunk ||
         (finished == total && finished > window.emitted)) {
    const int64_t count = std::min(per_chunk, finished - window.emitted);
    std::string data(static_cast<size_t>(count * element_size), '\0');
    for (int64_t done = 0; done < count;) {
      int64_t run = 0;
      const uint8_t* accumulator =
          Accumulator(tensor, window.emitted + done, &run);
      run = std::min(run, count - done);
      WithTraits(dtype, ConvertFrom{op_, accumulator, run, ranks, weight,
                                    reinterpret_cast<uint8_t*>(data.data()) +
                                        done * element_size});
      done += run;
    }
    out->push_back(
        FinishedChunk{tensor, window.emitted * element_size, std::move(data)});
    window.emitted += count;
  }
  // Free the blocks that were handed out whole.
  while (!window.blocks.empty() &&
         std::min((window.first_block + 1) * kBlockElements, total) <=
             window.emitted) {
    held_bytes_ -= static_cast<int64_t>(window.blocks.front().size());
    window.blocks.pop_front();
    ++window.first_block;
  }
}

std::vector<Reducer::FinishedChunk> Reducer::CloseContributors(
    const std::vector<bool>& contributors) {
  for (size_t r = 0; r < cursors_.size(); ++r) {
    cursors_[r].contributor = r < contributors.size() && contributors[r];
  }
  std::vector<FinishedChunk> finished;
  for (int t = 0; t < static_cast<int>(windows_.size()); ++t) {
    Emit(t, &finished);
  }
  return finished;
}

}  // namespace fedgather::server
