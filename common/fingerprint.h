// A contribution's fingerprint: the ordered (name, dtype, shape) of its
// tensors. Converts it to and from the wire, validates it, and compares the
// fingerprints of two ranks under the rules of an op.
#ifndef FEDGATHER_COMMON_FINGERPRINT_H_
#define FEDGATHER_COMMON_FINGERPRINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor_spec.h"
#include "fedgather/v1/fedgather.pb.h"

namespace fedgather {

using Fingerprint = std::vector<TensorSpec>;

// Upper bound on tensors in one contribution.
inline constexpr int kMaxTensorsPerContribution = 4096;

// FingerprintFromProto validates and converts the wire form: at least one
// tensor, unique non-empty names of at most kMaxTensorNameBytes, known dtypes,
// valid shapes. INVALID_ARGUMENT messages start with `where`.
absl::StatusOr<Fingerprint> FingerprintFromProto(
    const google::protobuf::RepeatedPtrField<v1::TensorSpec>& specs,
    absl::string_view where);

void FingerprintToProto(
    const Fingerprint& fingerprint,
    google::protobuf::RepeatedPtrField<v1::TensorSpec>* out);

// ContributionBytes returns the sum of ByteSize over the fingerprint.
absl::StatusOr<int64_t> ContributionBytes(const Fingerprint& fingerprint);

// CheckFingerprintForOp checks one rank's fingerprint against what `op`
// allows on its own: ALL_GATHER_V needs tensors of rank >= 1;
// ALL_GATHER_BYTES exactly one rank-1 U8 tensor. INVALID_ARGUMENT starting
// with `where` otherwise.
absl::Status CheckFingerprintForOp(v1::Op op, const Fingerprint& fingerprint,
                                   absl::string_view where);

// CheckReducible checks that ALL_REDUCE can reduce every tensor of
// `fingerprint` with `op`: a known op; no BOOL tensor; floating tensors only
// for MEAN and WEIGHTED_MEAN. INVALID_ARGUMENT naming the tensor otherwise.
absl::Status CheckReducible(v1::ReduceOp op, const Fingerprint& fingerprint);

// CompareFingerprints checks that rank `other_rank`'s fingerprint agrees with
// rank `first_rank`'s under `op`: equal for ALL_GATHER and BROADCAST; for
// ALL_GATHER_V and ALL_GATHER_BYTES equal except in the first dimension (rank
// >= 1 required). OK when they agree;
// otherwise INVALID_ARGUMENT naming both ranks, the tensor and the fields that
// differ.
absl::Status CompareFingerprints(v1::Op op, int first_rank,
                                 const Fingerprint& first, int other_rank,
                                 const Fingerprint& other);

// OpName returns the wire name of an op, e.g. "ALL_GATHER".
std::string OpName(v1::Op op);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_FINGERPRINT_H_
