#include "server/control/round_agreement.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fedgather::server {

RoundAgreement::RoundAgreement(std::string round,
                               std::vector<std::string> identities)
    : round_(std::move(round)),
      identities_(std::move(identities)),
      ranks_(identities_.size()) {}

std::string RoundAgreement::RankName(int rank) const {
  return absl::StrCat("rank ", rank, " (", identities_[rank], ")");
}

absl::Status RoundAgreement::Check(int rank, const v1::CollectiveHeader& header,
                                   const Fingerprint& fingerprint) const {
  if (first_rank_ < 0) {
    const int world = static_cast<int>(identities_.size());
    if (header.op() == v1::BROADCAST &&
        header.root() >= static_cast<uint32_t>(world)) {
      return absl::InvalidArgumentError(
          absl::StrCat(round_, ": ", RankName(rank), " broadcasts from root ",
                       header.root(), ", out of range for world size ", world));
    }
    return absl::OkStatus();
  }
  const v1::Op op = header.op();
  if (op != op_) {
    return absl::FailedPreconditionError(absl::StrCat(
        round_, ": ", RankName(rank), " called ", OpName(op), " but ",
        RankName(first_rank_), " called ", OpName(op_),
        "; the ranks are calling collectives in a different order"));
  }
  if (op_ == v1::BROADCAST && header.root() != root_) {
    return absl::InvalidArgumentError(absl::StrCat(
        round_, " (BROADCAST): ", RankName(rank), " names root ", header.root(),
        " but ", RankName(first_rank_), " names root ", root_));
  }
  if (op_ == v1::ALL_REDUCE && header.reduce() != reduce_) {
    return absl::InvalidArgumentError(absl::StrCat(
        round_, " (ALL_REDUCE): ", RankName(rank), " reduces with ",
        v1::ReduceOp_Name(header.reduce()), " but ", RankName(first_rank_),
        " with ", v1::ReduceOp_Name(reduce_)));
  }
  if (absl::Status same = CompareFingerprints(
          op_, first_rank_, first_fingerprint_, rank, fingerprint);
      !same.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(round_, " (", OpName(op_), "): ", same.message(), "; ",
                     RankName(rank), ", ", RankName(first_rank_)));
  }
  return absl::OkStatus();
}

absl::Status RoundAgreement::CheckWeight(
    int rank, const v1::CollectiveHeader& header) const {
  if (header.op() == v1::ALL_REDUCE && header.reduce() == v1::WEIGHTED_MEAN &&
      !(header.weight() > 0 && std::isfinite(header.weight()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        round_, ": ", RankName(rank), " declares weight ", header.weight(),
        "; WEIGHTED_MEAN needs a positive example count"));
  }
  return absl::OkStatus();
}

void RoundAgreement::Accept(int rank, v1::CollectiveHeader header,
                            Fingerprint fingerprint) {
  if (first_rank_ < 0) {
    op_ = header.op();
    root_ = header.root();
    reduce_ = header.reduce();
    first_rank_ = rank;
    first_fingerprint_ = fingerprint;
  }
  RankAgreement& mine = ranks_[rank];
  mine.accepted = true;
  mine.header = std::move(header);
  mine.fingerprint = std::move(fingerprint);
}

absl::Status RoundAgreement::EquivocationError(int rank,
                                               absl::string_view what) const {
  return absl::InvalidArgumentError(absl::StrCat(
      round_, ": ", RankName(rank), " resumed its contribution with ", what,
      " than it first sent; one round key cannot carry two "
      "contributions (equivocation)"));
}

absl::StatusOr<Digest> RoundAgreement::CheckResume(
    int rank, const v1::CollectiveHeader& header,
    const Fingerprint& fingerprint, const std::optional<Digest>& ended,
    bool* equivocation) {
  RankAgreement& mine = ranks_[rank];
  // The same key must carry the same contribution.
  const v1::CollectiveHeader& first = mine.header;
  if (fingerprint != mine.fingerprint || header.op() != first.op() ||
      header.root() != first.root() || header.reduce() != first.reduce() ||
      header.weight() != first.weight()) {
    *equivocation = true;
    return EquivocationError(rank, "a different header");
  }
  Digest declared;
  if (!DigestFromBytes(header.contribution_digest(), &declared)) {
    return absl::InvalidArgumentError(absl::StrCat(
        round_, ": ", RankName(rank),
        " resumed without contribution_digest; a resumed header must carry "
        "the contribution's 32-byte digest"));
  }
  if ((ended.has_value() && declared != *ended) ||
      DeclaredOther(rank, declared)) {
    *equivocation = true;
    return EquivocationError(rank, "different bytes");
  }
  mine.declared_digest = declared;
  return declared;
}

bool RoundAgreement::DeclaredOther(int rank, const Digest& digest) const {
  const std::optional<Digest>& declared = ranks_[rank].declared_digest;
  return declared.has_value() && *declared != digest;
}

}  // namespace fedgather::server
