#include "server/relay/reducer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/element_reduction.h"
#include "common/status_macros.h"

namespace fedgather::server {

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
  const size_t accumulator_size = AccumulatorBytes(fingerprint_[tensor].dtype);
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
  const size_t accumulator_size = AccumulatorBytes(dtype);
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
    FoldIntoAccumulators(op_, dtype, fresh, weight,
                         data + (element - first) * element_size, run,
                         accumulator);
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
      ConvertAccumulators(
          op_, dtype, accumulator, run, ranks, weight,
          reinterpret_cast<uint8_t*>(data.data()) + done * element_size);
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
