// PeerOffer: a member's offer of a peer endpoint to the direct data plane
// (docs/protocol.md, "Peer links"). Bind listens before the join, so the
// endpoint the member offers names a port that is already bound (a dialer
// that comes early waits in the socket's backlog); Open, once the epoch has
// formed, starts the listener that admits that epoch's links, checking
// certificates against the CRLs the rendezvous sent (Joined.peer_crl).
//
// Threads: Bind and Open run on the joining thread, once each; the
// accessors may be called from any thread after Open returned OK.
#ifndef FEDGATHER_CLIENT_PEER_PEER_OFFER_H_
#define FEDGATHER_CLIENT_PEER_PEER_OFFER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/peer/peer_listener.h"
#include "client/peer/peer_socket.h"
#include "client/peer/peer_tls.h"
#include "common/tls_credentials.h"

namespace fedgather {

// The epoch a PeerOffer opens for: what Joined said.
struct PeerEpoch {
  std::string group;
  uint64_t epoch = 0;
  int rank = 0;                         // this member's
  std::vector<std::string> identities;  // every member's, in rank order
  std::string crl_pem;                  // Joined.peer_crl
};

class PeerOffer {
 public:
  // Bind listens on `listen` (HOST:PORT; port 0 picks a free one) and
  // names the endpoint the other members are to dial: `advertise`
  // (HOST:PORT with a port above 0) when given, else the listen host with
  // the bound port. INVALID_ARGUMENT naming which one for a malformed
  // endpoint, or for a wildcard listen host (0.0.0.0, ::) without
  // `advertise`, since nobody can dial that; UNAVAILABLE when `listen`
  // cannot be bound.
  static absl::StatusOr<std::unique_ptr<PeerOffer>> Bind(
      const std::string& listen, const std::string& advertise);

  // The endpoint offered in JoinRequest.peer_endpoint.
  const std::string& endpoint() const { return endpoint_; }
  // The port the socket is bound to.
  int port() const { return port_; }

  // Open makes this member's PeerTls from `tls` and epoch.crl_pem, starts
  // the listener on the bound socket with `options`, and admits the links
  // of `epoch`. INVALID_ARGUMENT naming what does not load (the files, the
  // CRL); INTERNAL when the listener cannot start. Call it once.
  absl::Status Open(const TlsFiles& tls, const PeerEpoch& epoch,
                    PeerListenerOptions options);

  // After Open: this member's TLS, for dialing its peers, and the listener
  // that admits their links.
  const std::shared_ptr<const PeerTls>& tls() const { return tls_; }
  PeerListener* listener() const { return listener_.get(); }

 private:
  PeerOffer(PeerSocket socket, int port, std::string endpoint);

  PeerSocket socket_;  // the bound socket until Open hands it over
  const int port_;
  const std::string endpoint_;
  std::shared_ptr<const PeerTls> tls_;
  std::unique_ptr<PeerListener> listener_;
};

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_PEER_PEER_OFFER_H_
