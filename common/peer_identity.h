// The identity rule: who a participant is, taken only from its certificate.
#ifndef FEDGATHER_COMMON_PEER_IDENTITY_H_
#define FEDGATHER_COMMON_PEER_IDENTITY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fedgather {

// IdentityFromCertificatePem returns the identity of a leaf certificate: its
// first SAN URI, else its first SAN DNS name, else its subject CN.
// INVALID_ARGUMENT when the PEM does not parse or has none of the three.
absl::StatusOr<std::string> IdentityFromCertificatePem(absl::string_view pem);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_PEER_IDENTITY_H_
