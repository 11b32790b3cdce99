// The identity rule: who a participant is, taken only from its certificate.
#ifndef FEDGATHER_COMMON_PEER_IDENTITY_H_
#define FEDGATHER_COMMON_PEER_IDENTITY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fedgather {

// IdentityFromCertificatePem returns a participant's identity from its leaf
// certificate PEM (when `pem` holds a chain, the first certificate is the
// leaf and the only one read): the first SAN URI, else the first SAN DNS
// name, else the subject CN. The identity is never taken from anything else:
// not from IP SANs, other subject fields or the issuer, and never by falling
// past a source that is present but unusable.
// INVALID_ARGUMENT when the PEM does not parse; when the certificate has
// none of the three; when its SAN extension does not decode or appears
// twice, or its subject holds more than one CN; or when the chosen value is
// empty or holds a control character (NUL included).
// Keeps no state; callable from any thread.
absl::StatusOr<std::string> IdentityFromCertificatePem(absl::string_view pem);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_PEER_IDENTITY_H_
