// X.509 issuing with the OpenSSL 3 C API: a certificate authority, the
// server and participant certificates it signs, and the revocation lists
// (CRLs) it signs. Used by `fedgather provision`, `fedgather revoke` and by
// tests, which make their certificates with it.
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
#include "absl/strings/string_view.h"
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

// IssueCrl makes a PEM X.509 v2 certificate revocation list ("BEGIN X509
// CRL") signed by `ca` with ECDSA-SHA256: issuer the CA's subject,
// thisUpdate `this_update`, nextUpdate `next_update` (both to the second),
// an authority key identifier and a CRL number. It lists, sorted by serial,
// every entry of `existing_crl_pem` (when not empty) unchanged and the serial
// of each certificate in `revoked_cert_pems` with revocation date
// `this_update`; a serial already listed keeps its first entry and is not
// listed twice.
// The CRL number is one more than that of `existing_crl_pem`, or 1 without
// one, so a CRL built on its predecessor supersedes it.
// INVALID_ARGUMENT when `ca` does not parse, its key does not match its
// certificate or the certificate is not a CA; when a revoked certificate does
// not parse, is `ca` itself or was not issued (name and signature) by `ca`;
// when `existing_crl_pem` does not parse as a PEM CRL or was not signed by
// `ca`; or when next_update <= this_update. INTERNAL, with OpenSSL's error
// text, when OpenSSL fails.
absl::StatusOr<std::string> IssueCrl(
    const KeyAndCert& ca, const std::vector<std::string>& revoked_cert_pems,
    absl::Time this_update, absl::Time next_update,
    const std::string& existing_crl_pem = "");

// CertificateSerialHex returns the serial number of the (first) certificate
// in `cert_pem` as upper-case hexadecimal, two digits a byte without leading
// zero bytes (as `openssl x509 -serial` prints it); verification errors
// quote this form.
// INVALID_ARGUMENT when `cert_pem` does not parse.
absl::StatusOr<std::string> CertificateSerialHex(absl::string_view cert_pem);

// CrlSerialsHex returns the serials a PEM CRL lists, in its order, in the
// form of CertificateSerialHex. It does not check the CRL's signature.
// INVALID_ARGUMENT when `crl_pem` does not parse as a PEM CRL.
absl::StatusOr<std::vector<std::string>> CrlSerialsHex(
    absl::string_view crl_pem);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_CERT_ISSUER_H_
