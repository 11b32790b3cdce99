// ElementReduction: the element arithmetic of ALL_REDUCE, the same on both
// data planes (docs/protocol.md, "Ops" and "Peer links"): the server's
// relay Reducer (server/relay/reducer.h) and the direct plane's ring
// (client/peer/ring_all_reduce.h) fold and convert with these functions, so
// the two planes differ only in the order in which ranks are folded.
//
// Accumulation: F32, F16 and BF16 in fp32; F64 in fp64; integers exactly in
// 64 bits (a sum then wraps to the tensor's type, as the same sum in that
// type would). WEIGHTED_MEAN multiplies each element by its rank's weight
// (in fp64, then rounds to the accumulator) before folding; MEAN and
// WEIGHTED_MEAN divide once, when converting. MIN and MAX let NaN win, as
// torch does. Accumulators are native-endian, elements little-endian (the
// hosts fedgather runs on are little-endian).
#ifndef FEDGATHER_COMMON_ELEMENT_REDUCTION_H_
#define FEDGATHER_COMMON_ELEMENT_REDUCTION_H_

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"
#include "fedgather/v1/fedgather.pb.h"

namespace fedgather {

// AccumulatorBytes is the size of one accumulator of `dtype`: 4 for F32,
// F16 and BF16, 8 for every other dtype.
size_t AccumulatorBytes(DType dtype);

// FoldIntoAccumulators folds `count` elements of `dtype` at `data` into the
// `count` accumulators at `accumulators` with `op`: `first` sets them (the
// first rank folded), otherwise they combine. `weight` is the rank's
// WEIGHTED_MEAN weight (ignored for other ops).
void FoldIntoAccumulators(v1::ReduceOp op, DType dtype, bool first,
                          double weight, const uint8_t* data, int64_t count,
                          uint8_t* accumulators);

// ConvertAccumulators writes `count` finished accumulators as elements of
// `dtype` at `out`: MEAN divides by `ranks`, WEIGHTED_MEAN by
// `total_weight` (the sum of the folded ranks' weights).
void ConvertAccumulators(v1::ReduceOp op, DType dtype,
                         const uint8_t* accumulators, int64_t count, int ranks,
                         double total_weight, uint8_t* out);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_ELEMENT_REDUCTION_H_
