// DialPeerLink: the dialing end of a peer link (docs/protocol.md, "Peer
// links"): TCP to the endpoint the rendezvous gave, TLS 1.3 with
// PeerTls, then the hello, and the listener's verdict.
#ifndef FEDGATHER_CLIENT_PEER_PEER_DIAL_H_
#define FEDGATHER_CLIENT_PEER_PEER_DIAL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/peer/peer_link.h"
#include "client/peer/peer_tls.h"
#include "fedgather/v1/fedgather.pb.h"

namespace fedgather {

// DialPeerLink opens the link `hello` names (this member is
// hello.from_rank) to `endpoint`, whose member must be `expected_identity`
// (the rendezvous's member for hello.to_rank). The other end's certificate
// must pass PeerTls's checks and name exactly `expected_identity`, else the
// connection is closed before the hello is sent: UNAUTHENTICATED naming
// both identities. A listener's refusal comes back with the listener's
// code and message. UNAVAILABLE or DEADLINE_EXCEEDED when the endpoint
// cannot be reached, or the handshake not finished, by `deadline`.
absl::StatusOr<std::unique_ptr<PeerLink>> DialPeerLink(
    const PeerTls& tls, const std::string& endpoint,
    const v1::PeerLinkHello& hello, const std::string& expected_identity,
    absl::Time deadline);

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_PEER_PEER_DIAL_H_
