// RoundPlan: what every rank does in one round of the soak test, drawn from
// the soak's seed and the round's number alone, so that the rank threads
// agree on it without talking to each other: the collective, its tensors'
// names, dtypes and shapes (per rank where the op lets them differ), the
// chunk size each rank cuts its upload to, and whether, whose and where a
// connection is cut. RoundInputs are the
// deterministic bytes every rank contributes to a round, and
// SharedRoundInputs makes them once per round for all rank threads.
#ifndef FEDGATHER_TESTS_SOAK_ROUND_PLAN_H_
#define FEDGATHER_TESTS_SOAK_ROUND_PLAN_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/dtype.h"

namespace fedgather::testing {

enum class SoakOp { kAllGather, kAllGatherV, kAllGatherBytes, kAllReduce };

// CutKind says when the victim's proxy cuts its connection: once the
// victim has sent the given fraction of its upload (counted in TLS bytes
// through the proxy, so a little early), or once it has received the given
// fraction of its download.
enum class CutKind { kNone, kUpload, kDownload };

const char* SoakOpName(SoakOp op);

struct SoakTensor {
  std::string name;
  DType dtype = DType::kU8;
  // shapes[r] is rank r's shape; all equal except for ALL_GATHER_V (the
  // first dimension) and ALL_GATHER_BYTES (the length).
  std::vector<std::vector<int64_t>> shapes;
};

struct RoundPlan {
  SoakOp op = SoakOp::kAllGather;
  std::vector<SoakTensor> tensors;
  CutKind cut = CutKind::kNone;
  int victim = -1;
  double cut_fraction = 0;
  // By rank: the size it cuts its upload's chunks to (0: the server's
  // chunk limit). Ranks differ, and odd sizes end chunks inside elements.
  std::vector<int64_t> chunk_bytes;
};

struct PlanOptions {
  uint64_t seed = 1;
  int world = 8;
  int cut_percent = 10;  // rounds that cut a connection
  // The kinds of cut drawn (half each when both are allowed).
  bool upload_cuts = true;
  bool download_cuts = true;
  int64_t max_bytes = int64_t{1} << 20;  // the most one rank contributes
};

// PlanRound returns round `round`'s plan; the same for every caller.
// Sizes are log-uniform from 1 byte to options.max_bytes per rank.
RoundPlan PlanRound(const PlanOptions& options, int round);

// UploadBytes is what `rank` contributes to the round; DownloadBytes what
// it receives (the other ranks' parts, or the reduced result).
int64_t UploadBytes(const RoundPlan& plan, int rank);
int64_t DownloadBytes(const RoundPlan& plan, int rank);

struct RoundInputs {
  std::vector<std::vector<std::vector<uint8_t>>> bytes;  // [rank][tensor]
  std::vector<std::vector<int64_t>> sums;  // ALL_REDUCE (I64 SUM): [tensor]
};

// MakeRoundInputs returns every rank's deterministic input for `round`.
RoundInputs MakeRoundInputs(const PlanOptions& options, int round,
                            const RoundPlan& plan);

// SharedRoundInputs makes each round's inputs once, for the first rank
// thread that asks, and drops them when every rank is done with the round.
// Thread-safe.
class SharedRoundInputs {
 public:
  explicit SharedRoundInputs(const PlanOptions& options) : options_(options) {}

  // Get returns `round`'s inputs (made under the lock on the first call).
  std::shared_ptr<const RoundInputs> Get(int round, const RoundPlan& plan);
  // Done says one rank has finished with `round`.
  void Done(int round);

 private:
  struct Entry {
    std::shared_ptr<const RoundInputs> inputs;
    int done = 0;
  };
  const PlanOptions options_;
  absl::Mutex mu_;
  std::map<int, Entry> rounds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedgather::testing

#endif  // FEDGATHER_TESTS_SOAK_ROUND_PLAN_H_
