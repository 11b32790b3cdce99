// What the tests of the direct plane's collectives (client/peer) feed
// them: random parts for the all_gathers, random contributions for the
// all_reduces, each a function of (rank, seed) so that every rank and the
// reference make the same bytes.
#ifndef FEDGATHER_TESTS_CLIENT_PEER_COLLECTIVE_TEST_DATA_H_
#define FEDGATHER_TESTS_CLIENT_PEER_COLLECTIVE_TEST_DATA_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/peer/ring_chunks.h"
#include "common/fingerprint.h"
#include "fedgather/v1/fedgather.pb.h"
#include "tests/client/peer/peer_test_pki.h"

namespace fedgather::testing {

// Part: rank r's all_gather part of `size` random bytes.
std::string Part(int rank, size_t size, uint32_t seed);
// Expected: every rank's Part, in rank order, back to back.
std::string Expected(const std::vector<size_t>& sizes, uint32_t seed);

// What one op gave each rank: its status and its output.
struct RankOutcome {
  std::vector<absl::Status> status;
  std::vector<std::string> out;
};

// One rank's all_gather: rank `rank` gathers parts of `sizes` from `mine`
// into `out` (RingAllGather or BruckAllGather over that rank's links).
using GatherCall = std::function<absl::Status(
    int rank, const std::vector<size_t>& sizes, const char* mine, char* out,
    const RingOptions& options)>;

// The two all_gather algorithms over `ring`'s links (which must outlive
// the call): RingAllGather on the ring's, BruckAllGather on all of them.
GatherCall RingGatherOver(const TestRing& ring);
GatherCall BruckGatherOver(const TestRing& ring);

// RunGather runs `gather` once on every rank but `absent`, each on a
// thread of its own, rank r with Part(r, sizes[r], seed) and options[r].
RankOutcome RunGather(const GatherCall& gather,
                      const std::vector<size_t>& sizes,
                      const std::vector<RingOptions>& options, uint32_t seed,
                      int absent = -1);

// The all_reduce cases both algorithms' tests run: each op over tensors of
// every dtype it takes, several tensors, an empty one and one with fewer
// elements than members.
struct ReduceCase {
  Fingerprint tensors;
  v1::ReduceOp reduce;
};
std::vector<ReduceCase> ReduceCases();

// One rank's all_reduce: rank `rank` reduces `mine` into `out`
// (RingAllReduce or GatherAllReduce over that rank's links).
using ReduceCall = std::function<absl::Status(
    int rank, const Fingerprint& tensors, v1::ReduceOp reduce,
    const std::vector<double>& weights, const char* mine, char* out,
    const RingOptions& options)>;

// The two all_reduce algorithms over `ring`'s links (which must outlive
// the call), each with scratch of its own per call.
ReduceCall RingReduceOver(const TestRing& ring);
ReduceCall GatherReduceOver(const TestRing& ring);

// RunReduce runs `reduce_call` once on every rank but `absent`, each on a
// thread of its own, rank r with contributions[r] and options[r].
RankOutcome RunReduce(const ReduceCall& reduce_call, const Fingerprint& tensors,
                      v1::ReduceOp reduce, const std::vector<double>& weights,
                      const std::vector<std::string>& contributions,
                      const std::vector<RingOptions>& options, int absent = -1);

// The ranks, in the order an algorithm folds them, for element `element`
// of the `elements` of a contribution among `world` ranks.
using FoldOrder = std::function<std::vector<int>(int64_t element,
                                                 int64_t elements, int world)>;
// The ring's (client/peer/ring_all_reduce.h): element e lies in the
// segment s with ⌊E·s/N⌋ <= e < ⌊E·(s+1)/N⌋, which ranks s+1, …, s fold.
std::vector<int> RingFoldOrder(int64_t element, int64_t elements, int world);
// The log steps' (client/peer/gather_all_reduce.h): 0, 1, …, N−1.
std::vector<int> RankFoldOrder(int64_t element, int64_t elements, int world);

// ReferenceReduce folds every element of `contributions` in `order`, one
// element at a time, with the relay's arithmetic.
std::string ReferenceReduce(const Fingerprint& tensors, v1::ReduceOp reduce,
                            const std::vector<double>& weights,
                            const std::vector<std::string>& contributions,
                            const FoldOrder& order);

// Elements: how many elements `spec` holds.
int64_t Elements(const TensorSpec& spec);
// Contribution: rank r's all_reduce contribution to `tensors`, random
// elements, finite (and normal, for F16 and BF16) for the floating dtypes.
std::string Contribution(const Fingerprint& tensors, int rank, uint32_t seed);

}  // namespace fedgather::testing

#endif  // FEDGATHER_TESTS_CLIENT_PEER_COLLECTIVE_TEST_DATA_H_
