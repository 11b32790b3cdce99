#include "client/peer/bruck_all_gather.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/peer/peer_ring.h"

namespace fedgather {
namespace {

// What the receiving and the sending thread of one op share: how many
// steps have been received whole, and the op's first error.
class StepProgress {
 public:
  StepProgress(absl::Span<PeerLink* const> to, absl::Span<PeerLink* const> from)
      : to_(to), from_(from) {}

  void StepReceived() {
    absl::MutexLock lock(&mu_);
    ++received_;
  }
  // AwaitReceived waits until `steps` steps have been received; false
  // when the op failed.
  bool AwaitReceived(int steps) {
    absl::MutexLock lock(&mu_);
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return received_ >= steps || !first_error_.ok();
    };
    mu_.Await(absl::Condition(&ready));
    return first_error_.ok();
  }
  // Fail records the first error and breaks every link of the op, so that
  // the other thread (and the other ranks) stop too.
  void Fail(absl::Status status) {
    {
      absl::MutexLock lock(&mu_);
      if (!first_error_.ok()) return;
      first_error_ = std::move(status);
    }
    for (PeerLink* link : to_) link->Abort();
    for (PeerLink* link : from_) link->Abort();
  }
  absl::Status first_error() {
    absl::MutexLock lock(&mu_);
    return first_error_;
  }

 private:
  const absl::Span<PeerLink* const> to_;
  const absl::Span<PeerLink* const> from_;
  absl::Mutex mu_;
  int received_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

int BruckArrivalStep(int distance) {
  int step = 0;
  while (step < 30 && (2 << step) <= distance) ++step;
  return step;
}

absl::Status BruckAllGather(int rank, absl::Span<const size_t> part_sizes,
                            const char* mine, char* out,
                            absl::Span<PeerLink* const> to,
                            absl::Span<PeerLink* const> from,
                            const RingOptions& options) {
  const int world = static_cast<int>(part_sizes.size());
  const int steps = LogSteps(world);
  if (rank < 0 || rank >= world || options.chunk_bytes == 0 ||
      options.chunk_bytes > (size_t{1} << 31) ||
      to.size() < static_cast<size_t>(steps) ||
      from.size() < static_cast<size_t>(steps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("log-step all_gather: rank ", rank, " of ", world,
                     ", chunks of ", options.chunk_bytes, " bytes, ", to.size(),
                     " and ", from.size(), " links for ", steps, " steps"));
  }
  std::vector<size_t> offsets(world + 1, 0);
  for (int p = 0; p < world; ++p) offsets[p + 1] = offsets[p] + part_sizes[p];
  if (mine != out + offsets[rank] && part_sizes[rank] > 0) {
    std::memcpy(out + offsets[rank], mine, part_sizes[rank]);
  }
  // The parts exchanged at step k: this rank sends those `first` − i and
  // receives those `first` − 2^k − i, for i < Count(k).
  auto count = [&](int k) { return std::min(1 << k, world - (1 << k)); };
  auto part_at = [&](int first, int i) {
    return ((first - i) % world + world) % world;
  };

  StepProgress progress(to, from);
  std::thread sender([&] {
    std::string copy;
    for (int k = 0; k < steps; ++k) {
      // The parts sent at step k arrived before it.
      if (!progress.AwaitReceived(k)) return;
      for (int i = 0; i < count(k); ++i) {
        const int part = part_at(rank, i);
        for (size_t at = 0; at < part_sizes[part];) {
          const size_t n = std::min(options.chunk_bytes, part_sizes[part] - at);
          const char* data = out + offsets[part] + at;
          if (part != rank && options.forward_hook) {
            copy.assign(data, n);
            options.forward_hook(part, copy.data(), copy.size());
            data = copy.data();
          }
          absl::Status status = SendRingChunk(to[k], options, part, data, n);
          if (!status.ok()) return progress.Fail(std::move(status));
          at += n;
        }
      }
    }
  });

  for (int k = 0; k < steps; ++k) {
    for (int i = 0; i < count(k); ++i) {
      const int part = part_at(rank - (1 << k), i);
      for (size_t at = 0; at < part_sizes[part];) {
        const size_t due = std::min(options.chunk_bytes, part_sizes[part] - at);
        absl::Status status = ReceiveRingChunk(from[k], options, part, due, at,
                                               out + offsets[part] + at);
        if (!status.ok()) {
          progress.Fail(std::move(status));
          sender.join();
          return progress.first_error();
        }
        at += due;
      }
    }
    progress.StepReceived();
  }
  sender.join();
  return progress.first_error();
}

}  // namespace fedgather
