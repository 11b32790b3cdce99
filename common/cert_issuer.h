// X.509 issuing with the OpenSSL 3 C API: a certificate authority and the
// server and participant certificates it signs. Used by `fedgather
// provision` and by tests, which make their certificates with it.
#ifndef FEDGATHER_COMMON_CERT_ISSUER_H_
#define FEDGATHER_COMMON_CERT_ISSUER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace fedgather {

struct KeyAndCert {
  std::string key_pem;   // PKCS#8 private key
  std::string cert_pem;  // certificate
};

struct CertificateSpec {
  std::string common_name;
  std::vector<std::string> dns_names;     // SAN DNS
  std::vector<std::string> ip_addresses;  // SAN IP, IPv4 or IPv6 text
  std::vector<std::string> uris;          // SAN URI, e.g. spiffe://fedgather/x
  bool server_auth = false;               // extendedKeyUsage serverAuth
  bool client_auth = false;               // extendedKeyUsage clientAuth
  absl::Time not_before = absl::InfinitePast();   // InfinitePast: now - 5 min
  absl::Time not_after = absl::InfiniteFuture();  // InfiniteFuture: +365 days
};

// CreateCertificateAuthority makes an EC P-256 key and a self-signed CA
// certificate (CA:TRUE, keyCertSign and cRLSign) valid from five minutes ago
// for `validity`. INTERNAL carries OpenSSL's error text.
absl::StatusOr<KeyAndCert> CreateCertificateAuthority(
    const std::string& common_name, absl::Duration validity);

// IssueCertificate makes an EC P-256 key and a leaf certificate (CA:FALSE)
// signed by `ca` with SHA-256 and a random 128-bit serial. INVALID_ARGUMENT
// for an unparsable IP address or CA; INTERNAL for OpenSSL failures.
absl::StatusOr<KeyAndCert> IssueCertificate(const KeyAndCert& ca,
                                            const CertificateSpec& spec);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_CERT_ISSUER_H_
