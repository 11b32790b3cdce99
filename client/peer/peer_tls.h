// PeerTls: one member's TLS for its peer links (docs/security.md, "Peer
// links"). Both ends present their federation certificate, the one they
// use with the server, and each verifies the other's as the server does a
// client's (common/cert_verifier.h): the chain to the federation CA,
// validity, the CRL, clientAuth usage, and an identity. That the identity
// is the member the rendezvous named for the link is checked by the callers
// (DialPeerLink, client/peer/peer_dial.h, and PeerListener,
// client/peer/peer_listener.h) before any tensor byte moves.
//
// TLS 1.3 only, AES-128-GCM first; no session tickets or resumption.
// OpenSSL's own chain check is off in the handshake (a member certificate
// carries clientAuth, not serverAuth, and the listener's end presents one
// too); TLS 1.3 still makes each end prove its key, and Handshake verifies
// the chain right after.
//
// Create sets SIGPIPE to ignored when it has its default action: a write
// to a link whose other end is gone then fails instead of ending the
// process. Immutable after Create; Handshake may run on any number of threads.
#ifndef FEDGATHER_CLIENT_PEER_PEER_TLS_H_
#define FEDGATHER_CLIENT_PEER_PEER_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/peer/peer_link.h"
#include "client/peer/peer_socket.h"
#include "common/tls_credentials.h"

struct ssl_ctx_st;

namespace fedgather {

class PeerTls {
 public:
  // Create loads this member's certificate and key and the federation CA
  // from `tls`, and the CRLs in `crl_pem` (empty: none). INVALID_ARGUMENT
  // naming what does not load; plaintext TlsFiles are refused.
  static absl::StatusOr<std::shared_ptr<const PeerTls>> Create(
      const TlsFiles& tls, const std::string& crl_pem = "");
  ~PeerTls();
  PeerTls(const PeerTls&) = delete;
  PeerTls& operator=(const PeerTls&) = delete;

  // The identity this member's certificate names.
  const std::string& identity() const { return identity_; }

  enum class Role { kDialer, kListener };
  // Handshake runs TLS 1.3 on a connected `socket` in `role` and verifies
  // the other end's certificate at the time of the call. `name` names the
  // link in errors. UNAVAILABLE when the handshake fails, DEADLINE_EXCEEDED
  // when it does not finish by `deadline`, UNAUTHENTICATED (the verifier's
  // reason) when the certificate does not pass.
  absl::StatusOr<std::unique_ptr<PeerLink>> Handshake(
      PeerSocket socket, Role role, absl::Time deadline,
      const std::string& name) const;

 private:
  PeerTls() = default;

  ssl_ctx_st* context_ = nullptr;
  std::unique_ptr<ClientCertVerifier> verifier_;
  std::string identity_;
};

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_PEER_PEER_TLS_H_
