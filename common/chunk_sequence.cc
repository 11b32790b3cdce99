#include "common/chunk_sequence.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace fedgather {

ChunkSequence::ChunkSequence(const Fingerprint& fingerprint,
                             int64_t max_chunk_bytes)
    : fingerprint_(fingerprint), max_chunk_bytes_(max_chunk_bytes) {
  tensor_bytes_.reserve(fingerprint.size());
  for (const TensorSpec& spec : fingerprint) {
    // Validated fingerprints have representable sizes.
    tensor_bytes_.push_back(ByteSize(spec).value());
    total_bytes_ += tensor_bytes_.back();
  }
  SkipCompleteTensors();
}

void ChunkSequence::SkipCompleteTensors() {
  while (tensor_ < tensor_bytes_.size() && offset_ == tensor_bytes_[tensor_]) {
    ++tensor_;
    offset_ = 0;
  }
}

absl::Status ChunkSequence::Accept(uint64_t tensor_index, uint64_t offset,
                                   uint64_t size) {
  if (tensor_ == tensor_bytes_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk for tensor ", tensor_index, " at offset ", offset,
                     " after all ", total_bytes_, " declared bytes were sent"));
  }
  const TensorSpec& expected = fingerprint_[tensor_];
  if (tensor_index != tensor_ || offset != static_cast<uint64_t>(offset_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk for tensor ", tensor_index, " at offset ", offset,
                     " is out of order: expected tensor ", tensor_, " ('",
                     expected.name, "') at offset ", offset_));
  }
  if (size == 0 || size > static_cast<uint64_t>(max_chunk_bytes_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk of ", size, " bytes for tensor '", expected.name,
                     "': chunks must hold 1 to ", max_chunk_bytes_, " bytes"));
  }
  const int64_t declared = tensor_bytes_[tensor_];
  if (size > static_cast<uint64_t>(declared - offset_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk of ", size, " bytes at offset ", offset, " of tensor '",
        expected.name, "' runs past its declared size of ", declared,
        " bytes (", SpecToString(expected), ")"));
  }
  offset_ += static_cast<int64_t>(size);
  bytes_done_ += static_cast<int64_t>(size);
  SkipCompleteTensors();
  return absl::OkStatus();
}

absl::Status ChunkSequence::CheckComplete() const {
  if (tensor_ == tensor_bytes_.size()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "contribution ended early: tensor '", fingerprint_[tensor_].name,
      "' has ", offset_, " of ", tensor_bytes_[tensor_], " bytes; ",
      bytes_done_, " of ", total_bytes_, " bytes in all"));
}

absl::Status ChunkSequence::SkipTo(int64_t bytes) {
  if (bytes < 0 || bytes > total_bytes_ - bytes_done_) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resume at byte ", bytes, " of ", total_bytes_));
  }
  while (bytes > 0) {
    const int64_t step = std::min(bytes, tensor_bytes_[tensor_] - offset_);
    offset_ += step;
    bytes_done_ += step;
    bytes -= step;
    SkipCompleteTensors();
  }
  return absl::OkStatus();
}

}  // namespace fedgather
