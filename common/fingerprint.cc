#include "common/fingerprint.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/bounded_text.h"
#include "common/status_macros.h"

namespace fedgather {

absl::StatusOr<Fingerprint> FingerprintFromProto(
    const google::protobuf::RepeatedPtrField<v1::TensorSpec>& specs,
    absl::string_view where) {
  if (specs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": the contribution has no tensors"));
  }
  if (specs.size() > kMaxTensorsPerContribution) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", specs.size(), " tensors, above the limit of ",
                     kMaxTensorsPerContribution));
  }
  Fingerprint fingerprint;
  fingerprint.reserve(specs.size());
  std::set<absl::string_view> names;
  for (int i = 0; i < specs.size(); ++i) {
    const v1::TensorSpec& wire = specs[i];
    if (wire.name().empty() || wire.name().size() > kMaxTensorNameBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": tensor ", i, " has an empty or over-long name (",
          wire.name().size(), " bytes)"));
    }
    if (!names.insert(wire.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": tensor name '", wire.name(), "' appears twice"));
    }
    TensorSpec spec;
    spec.name = wire.name();
    absl::StatusOr<DType> dtype = DTypeFromWire(wire.dtype());
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": tensor '", wire.name(), "': ", dtype.status().message()));
    }
    spec.dtype = *dtype;
    spec.shape.assign(wire.shape().begin(), wire.shape().end());
    absl::StatusOr<int64_t> bytes = ByteSize(spec);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", bytes.status().message()));
    }
    fingerprint.push_back(std::move(spec));
  }
  if (absl::Status total = ContributionBytes(fingerprint).status();
      !total.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", total.message()));
  }
  return fingerprint;
}

void FingerprintToProto(
    const Fingerprint& fingerprint,
    google::protobuf::RepeatedPtrField<v1::TensorSpec>* out) {
  out->Clear();
  for (const TensorSpec& spec : fingerprint) {
    v1::TensorSpec* wire = out->Add();
    wire->set_name(spec.name);
    wire->set_dtype(static_cast<v1::DType>(spec.dtype));
    for (int64_t dim : spec.shape) wire->add_shape(dim);
  }
}

absl::StatusOr<int64_t> ContributionBytes(const Fingerprint& fingerprint) {
  int64_t total = 0;
  for (const TensorSpec& spec : fingerprint) {
    FG_ASSIGN_OR_RETURN(const int64_t bytes, ByteSize(spec));
    if (bytes > INT64_MAX - total) {
      return absl::InvalidArgumentError("contribution size overflows int64");
    }
    total += bytes;
  }
  return total;
}

namespace {

// A message lists at most this many tensor names, each cut to this length:
// a header may carry 4096 names of 1 KiB.
constexpr size_t kNamesListed = 8;
constexpr size_t kNameBytesListed = 64;

// Names lists the fingerprint's tensor names, bounded.
std::string Names(const Fingerprint& fingerprint) {
  std::vector<absl::string_view> names;
  for (const TensorSpec& spec : fingerprint) names.push_back(spec.name);
  return JoinBounded(names, kNamesListed, kNameBytesListed);
}

}  // namespace

absl::Status CompareFingerprints(v1::Op op, int first_rank,
                                 const Fingerprint& first, int other_rank,
                                 const Fingerprint& other) {
  const std::string ranks =
      absl::StrCat("rank ", other_rank, " and rank ", first_rank);
  if (first.size() != other.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        ranks, " contribute different tensor counts: rank ", other_rank,
        " has ", other.size(), " [", Names(other), "], rank ", first_rank,
        " has ", first.size(), " [", Names(first), "]"));
  }
  for (size_t i = 0; i < first.size(); ++i) {
    const TensorSpec& a = first[i];
    const TensorSpec& b = other[i];
    if (a.name != b.name) {
      return absl::InvalidArgumentError(absl::StrCat(
          ranks, " differ in the name of tensor ", i, ": rank ", other_rank,
          " has '", b.name, "', rank ", first_rank, " has '", a.name, "'"));
    }
    std::vector<std::string> diffs;
    if (a.dtype != b.dtype) {
      diffs.push_back(absl::StrCat("dtype ", DTypeName(b.dtype), " vs ",
                                   DTypeName(a.dtype)));
    }
    bool shapes_agree = a.shape == b.shape;
    if (op == v1::ALL_GATHER_V || op == v1::ALL_GATHER_BYTES) {
      if (a.shape.empty() || b.shape.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            OpName(op), " needs tensors of rank >= 1, but tensor '", a.name,
            "' is a scalar on rank ",
            a.shape.empty() ? first_rank : other_rank));
      }
      shapes_agree =
          a.shape.size() == b.shape.size() &&
          std::equal(a.shape.begin() + 1, a.shape.end(), b.shape.begin() + 1);
    }
    if (!shapes_agree) {
      diffs.push_back(absl::StrCat("shape ", ShapeToString(b.shape), " vs ",
                                   ShapeToString(a.shape)));
    }
    if (!diffs.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(ranks, " disagree on tensor '", a.name,
                       "': ", absl::StrJoin(diffs, "; "), " (rank ", other_rank,
                       " vs rank ", first_rank, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFingerprintForOp(v1::Op op, const Fingerprint& fingerprint,
                                   absl::string_view where) {
  if (op == v1::ALL_GATHER_V) {
    for (const TensorSpec& spec : fingerprint) {
      if (spec.shape.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where,
                         ": ALL_GATHER_V needs tensors of rank >= 1, "
                         "but tensor '",
                         spec.name, "' is a scalar"));
      }
    }
  }
  if (op == v1::ALL_GATHER_BYTES &&
      (fingerprint.size() != 1 || fingerprint[0].dtype != DType::kU8 ||
       fingerprint[0].shape.size() != 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where,
        ": ALL_GATHER_BYTES takes exactly one rank-1 U8 tensor (the byte "
        "string); got [",
        Names(fingerprint), "]",
        fingerprint.empty()
            ? ""
            : absl::StrCat(", the first ", SpecToString(fingerprint[0]))));
  }
  return absl::OkStatus();
}

absl::Status CheckReducible(v1::ReduceOp op, const Fingerprint& fingerprint) {
  if (op != v1::SUM && op != v1::MEAN && op != v1::MIN && op != v1::MAX &&
      op != v1::WEIGHTED_MEAN) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ALL_REDUCE needs a reduction (SUM, MEAN, MIN, MAX or WEIGHTED_MEAN), "
        "not ",
        v1::ReduceOp_Name(op)));
  }
  for (const TensorSpec& spec : fingerprint) {
    if (spec.dtype == DType::kBool) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", spec.name, "' is BOOL, which ALL_REDUCE cannot reduce"));
    }
    const bool floating =
        spec.dtype == DType::kF32 || spec.dtype == DType::kF64 ||
        spec.dtype == DType::kF16 || spec.dtype == DType::kBF16;
    if ((op == v1::MEAN || op == v1::WEIGHTED_MEAN) && !floating) {
      return absl::InvalidArgumentError(absl::StrCat(
          v1::ReduceOp_Name(op), " needs floating tensors, but tensor '",
          spec.name, "' is ", DTypeName(spec.dtype), " (use SUM)"));
    }
  }
  return absl::OkStatus();
}

std::string OpName(v1::Op op) { return v1::Op_Name(op); }

}  // namespace fedgather
