// Verification of a client certificate, with a reason for every refusal.
// The server's TLS handshake already requires a certificate that chains to
// the client CA and is valid (common/tls_credentials.h); the server checks it
// again on every call, and at each policy reload and periodic re-check, for
// what the handshake does not check (the CRL, a CA certificate used as a
// leaf, the identity) and for a certificate that expired since, so that each
// refusal names its reason and is audited. The client checks its own
// certificate with it to explain a handshake the server refused
// (client/handshake_refusal.h).
#ifndef FEDGATHER_COMMON_CERT_VERIFIER_H_
#define FEDGATHER_COMMON_CERT_VERIFIER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace fedgather {

// What a verified client certificate says.
struct VerifiedCertificate {
  std::string identity;    // IdentityFromCertificatePem's rule
  std::string serial_hex;  // as CertificateSerialHex writes it
  std::string subject;     // RFC 2253 text, e.g. "CN=site-1"
  absl::Time not_before;
  absl::Time not_after;
};

// ClientCertVerifier checks client certificates against a fixed set of CAs
// and CRLs. Its CAs and CRLs are fixed at Create; Verify is const and may be
// called from any number of threads at once. It remembers (a bounded cache
// of its own, under a lock) the certificates it accepted, and while every
// certificate of the verified chain is valid answers them again without
// parsing: the same answer a full verification gives, since nothing it
// checks changes inside that window. Keeps no global state.
class ClientCertVerifier {
 public:
  // Create loads the trusted CAs and the CRLs.
  // `ca_pem` holds one or more PEM CA certificates (basicConstraints
  // CA:TRUE); they are the only trust anchors. `crl_pem` is empty for no
  // revocation checking, else one or more PEM CRLs, each signed (issuer name
  // and signature) by one of the CAs. A CRL past its nextUpdate is accepted
  // and still honoured: what it revokes stays revoked. Its staleness is the
  // caller's to report; see crl_next_update(). `ca_name` names the CAs in
  // refusals ("is not issued by <ca_name>").
  // INVALID_ARGUMENT, naming the problem, when `ca_pem` holds no certificate,
  // a block that does not parse or a certificate that is not a CA; when a
  // non-empty `crl_pem` holds no CRL or one that does not parse; or when a
  // CRL is not signed by any of the CAs.
  static absl::StatusOr<std::unique_ptr<ClientCertVerifier>> Create(
      const std::string& ca_pem, const std::string& crl_pem,
      std::string ca_name = "this server's client CA");

  ~ClientCertVerifier();
  ClientCertVerifier(const ClientCertVerifier&) = delete;
  ClientCertVerifier& operator=(const ClientCertVerifier&) = delete;

  // Verify checks the leaf `cert_pem` (gRPC's auth context property
  // "x509_pem_cert") at time `now`, with `chain_pem` (property
  // "x509_pem_cert_chain": zero or more PEM certificates, which may include
  // the leaf) as untrusted intermediates. The certificate must chain to one
  // of the CAs, every certificate of the chain must be valid at `now`, none
  // may be revoked by a loaded CRL (a CA without a CRL revokes nothing), the
  // leaf must not be a CA, and it must be fit for TLS client authentication:
  // extendedKeyUsage clientAuth when it has that extension, and keyUsage
  // digitalSignature when it has that one. Finally the leaf must carry an
  // identity (IdentityFromCertificatePem).
  // Returns UNAUTHENTICATED otherwise, with a message of the form
  //   client certificate '<identity>' (serial <hex>) <reason>
  // (the identity is the one the certificate claims, left out when none can
  // be read) where <reason> is, for example:
  //   expired at <RFC 3339>            is not valid until <RFC 3339>
  //   was revoked (serial <hex>) at <RFC 3339>
  //   is not issued by <ca_name> (issuer: <DN>)
  //   is not for client authentication (<why>)
  //   is a CA certificate, not a client certificate
  // and "no client certificate was presented" for an empty `cert_pem`.
  // Blocks only on CPU work.
  absl::StatusOr<VerifiedCertificate> Verify(absl::string_view cert_pem,
                                             absl::string_view chain_pem,
                                             absl::Time now) const;

  // crl_next_update returns the earliest nextUpdate of the loaded CRLs, or
  // absl::InfiniteFuture() when no CRL (or none with a nextUpdate) is
  // loaded. A caller that sees it pass should warn that the CRL is stale.
  absl::Time crl_next_update() const;

  // crl_count returns how many CRLs were loaded.
  int crl_count() const;

 private:
  struct State;
  explicit ClientCertVerifier(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// ClaimedIdentity returns the identity an UNVERIFIED certificate claims
// (IdentityFromCertificatePem's rule), or "" when `cert_pem` is empty or none
// can be read. For audit records of refused peers only: never authorize on
// it.
std::string ClaimedIdentity(absl::string_view cert_pem);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_CERT_VERIFIER_H_
