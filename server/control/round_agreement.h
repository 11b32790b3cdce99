// RoundAgreement: what the ranks of one round must agree on before their
// bytes move, whatever moves them (the star relay's Round today; a direct
// peer-to-peer data plane later, which has no fan-out log). The first header
// the round accepts fixes the op, a BROADCAST's root, an ALL_REDUCE's
// reduction and the tensors' fingerprint; every later header must agree.
// Each rank's own first header, and the contribution digest its resumes
// declare, are kept to check a resumed stream against: one round key
// cannot carry two contributions (equivocation).
//
// Thread safety: none; the owner (a data plane's round) calls it under its
// own lock. It holds no bytes and no streams, and calls nothing back.
// Errors come back as statuses naming the round and the ranks; failing the
// round with them, and reporting events, is the owner's part.
#ifndef FEDGATHER_SERVER_CONTROL_ROUND_AGREEMENT_H_
#define FEDGATHER_SERVER_CONTROL_ROUND_AGREEMENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/digest.h"
#include "common/fingerprint.h"
#include "fedgather/v1/fedgather.pb.h"

namespace fedgather::server {

class RoundAgreement {
 public:
  // `round` names the round in messages ("group 'demo' epoch 1 seq 0");
  // `identities` are the ranks' identities, by rank.
  RoundAgreement(std::string round, std::vector<std::string> identities);

  // Check checks `rank`'s header, whose tensors are `fingerprint`: against
  // the first accepted header (a different op is FAILED_PRECONDITION; a
  // different root, reduction or fingerprint INVALID_ARGUMENT), or, for the
  // first, that a BROADCAST's root is a rank (INVALID_ARGUMENT). Changes
  // nothing.
  absl::Status Check(int rank, const v1::CollectiveHeader& header,
                     const Fingerprint& fingerprint) const;
  // CheckWeight checks that an ALL_REDUCE WEIGHTED_MEAN header declares a
  // positive, finite weight (INVALID_ARGUMENT otherwise).
  absl::Status CheckWeight(int rank, const v1::CollectiveHeader& header) const;
  // Accept records `rank`'s checked header; the first fixes the round's.
  void Accept(int rank, v1::CollectiveHeader header, Fingerprint fingerprint);

  // Whether a header was accepted, and what the first one fixed.
  bool Agreed() const { return first_rank_ >= 0; }
  v1::Op op() const { return op_; }
  uint32_t root() const { return root_; }

  // CheckResume checks a resumed header of `rank` (which had one accepted)
  // and returns the contribution digest it declares, which it keeps.
  // INVALID_ARGUMENT when the header or fingerprint is not the rank's
  // first, or the digest not the one it declared before or ended its
  // upload with (`ended`): these set *equivocation. INVALID_ARGUMENT
  // without it when the header declares no digest.
  absl::StatusOr<Digest> CheckResume(int rank,
                                     const v1::CollectiveHeader& header,
                                     const Fingerprint& fingerprint,
                                     const std::optional<Digest>& ended,
                                     bool* equivocation);
  // DeclaredOther is true when a resume of `rank` declared a digest
  // other than `digest` (the upload that ended is then an equivocation).
  bool DeclaredOther(int rank, const Digest& digest) const;
  // EquivocationError is the status of `rank`'s equivocation: it sent
  // `what` ("a different header", "different bytes").
  absl::Status EquivocationError(int rank, absl::string_view what) const;

 private:
  struct RankAgreement {
    bool accepted = false;
    v1::CollectiveHeader header;            // its first header
    Fingerprint fingerprint;                // and its tensors
    std::optional<Digest> declared_digest;  // as a resume declared
  };

  std::string RankName(int rank) const;

  const std::string round_;
  const std::vector<std::string> identities_;
  std::vector<RankAgreement> ranks_;
  int first_rank_ = -1;
  v1::Op op_ = v1::OP_UNSPECIFIED;
  uint32_t root_ = 0;
  v1::ReduceOp reduce_ = v1::REDUCE_UNSPECIFIED;
  Fingerprint first_fingerprint_;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_CONTROL_ROUND_AGREEMENT_H_
