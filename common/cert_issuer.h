// X.509 issuing with the OpenSSL 3 C API: a certificate authority and the
// server and participant certificates it signs. Used by `fedgather
// provision` and by tests, which make their certificates with it.
//
// Every key is EC P-256, every signature ECDSA with SHA-256, and every key is
// returned as a PKCS#8 PEM ("BEGIN PRIVATE KEY", unencrypted). The functions
// keep no state, block only on CPU work, and may be called from any thread
// concurrently.
#ifndef FEDGATHER_COMMON_CERT_ISSUER_H_
#define FEDGATHER_COMMON_CERT_ISSUER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace fedgather {

struct KeyAndCert {
  std::string key_pem;   // PKCS#8 private key PEM
  std::string cert_pem;  // certificate PEM
};

// How long before the moment of issue a certificate becomes valid when the
// caller does not say, to tolerate clock skew between machines.
inline constexpr absl::Duration kDefaultBackdate = absl::Minutes(5);
// How long a leaf certificate is valid when the caller does not say.
inline constexpr absl::Duration kDefaultLeafValidity = absl::Hours(24 * 365);

struct CertificateSpec {
  // Subject CN; empty for none. At most 64 characters, no control characters.
  std::string common_name;
  // SAN entries, written in this order. Each DNS name and URI is non-empty
  // printable ASCII without spaces; each IP address is IPv4 or IPv6 text.
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;
  std::vector<std::string> uris;  // e.g. spiffe://fedgather/site-1
  bool server_auth = false;       // extendedKeyUsage serverAuth
  bool client_auth = false;       // extendedKeyUsage clientAuth
  // The validity window. The defaults are sentinels: absl::InfinitePast()
  // means "kDefaultBackdate before the moment of issue" and
  // absl::InfiniteFuture() means "kDefaultLeafValidity after it". Any other
  // value is used as given (to the second), even if already past; it is not
  // clipped to the CA's own window.
  absl::Time not_before = absl::InfinitePast();
  absl::Time not_after = absl::InfiniteFuture();
};

// CreateCertificateAuthority makes an EC P-256 key and a self-signed CA
// certificate for subject CN `common_name`: basicConstraints CA:TRUE
// (critical), keyUsage keyCertSign and cRLSign (critical) and a subject key
// identifier, valid from kDefaultBackdate ago until `validity` from now.
// INVALID_ARGUMENT for an empty or unusable `common_name` or a `validity`
// that is not positive; INTERNAL, with OpenSSL's error text, when OpenSSL
// fails.
absl::StatusOr<KeyAndCert> CreateCertificateAuthority(
    const std::string& common_name, absl::Duration validity);

// IssueCertificate makes an EC P-256 key and a leaf certificate for `spec`
// signed by `ca`: basicConstraints CA:FALSE (critical), keyUsage
// digitalSignature and keyEncipherment (critical), extendedKeyUsage per
// `spec` (omitted when neither is set), the SANs of `spec` (omitted when
// there are none), subject and authority key identifiers, and a random
// positive serial of up to 128 bits.
// INVALID_ARGUMENT when `ca` does not parse, its key does not match its
// certificate or the certificate is not a CA, or when `spec` holds an
// invalid name or address or a window with not_after <= not_before;
// INTERNAL, with OpenSSL's error text, when OpenSSL fails.
absl::StatusOr<KeyAndCert> IssueCertificate(const KeyAndCert& ca,
                                            const CertificateSpec& spec);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_CERT_ISSUER_H_
