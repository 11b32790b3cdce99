// PeerListener: the listening end of a member's peer links
// (docs/protocol.md, "Peer links"). It accepts TCP connections on the
// member's peer endpoint, runs the TLS handshake (PeerTls) and reads the
// hello, then admits the link only when it belongs to an epoch this member
// is in (ExpectEpoch): addressed to this member's rank, from another rank
// of that epoch whose member is exactly the identity the certificate names,
// and the first link from that rank. Everything else gets a refusing
// verdict naming why and is closed, and `on_refusal` hears of it.
//
// Bounds: at most `max_handshakes` connections are between accept and
// verdict at once (more are closed at once), each for at most
// `handshake_timeout`; a hello that names an epoch not (yet) expected
// waits within that time for ExpectEpoch, so a fast dialer does not race a
// slow listener. Admitted links wait in the epoch until Take or
// ForgetEpoch.
//
// Threads: one accepting thread and `max_handshakes` handshake threads of
// its own; every public method may be called from any thread.
// `on_refusal` runs on a handshake thread with no lock held.
#ifndef FEDGATHER_CLIENT_PEER_PEER_LISTENER_H_
#define FEDGATHER_CLIENT_PEER_PEER_LISTENER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/peer/peer_link.h"
#include "client/peer/peer_socket.h"
#include "client/peer/peer_tls.h"

namespace fedgather {

struct PeerListenerOptions {
  absl::Duration handshake_timeout = absl::Seconds(10);
  int max_handshakes = 8;
  // Each refused connection: the status names the dialer (its claimed
  // identity where it has one) and the reason.
  std::function<void(const absl::Status&)> on_refusal;
};

class PeerListener {
 public:
  // Start takes over `listening` (a socket ListenTcp made; a connection
  // that came before waits in its backlog) and starts the threads.
  // INTERNAL when the socket is not bound or a thread's pipe cannot be made.
  static absl::StatusOr<std::unique_ptr<PeerListener>> Start(
      std::shared_ptr<const PeerTls> tls, PeerSocket listening,
      PeerListenerOptions options);
  // Stops the threads (handshakes in progress are cut) and closes every
  // link not taken.
  ~PeerListener();
  PeerListener(const PeerListener&) = delete;
  PeerListener& operator=(const PeerListener&) = delete;

  // The bound port.
  int port() const { return port_; }

  // ExpectEpoch admits links of `group`'s `epoch` to this member's `rank`
  // from the other members, `identities` in rank order.
  void ExpectEpoch(const std::string& group, uint64_t epoch, int rank,
                   std::vector<std::string> identities);
  // ForgetEpoch refuses that epoch's links from now on and closes those
  // not taken; Take calls waiting on it return CANCELLED.
  void ForgetEpoch(const std::string& group, uint64_t epoch);

  // Take waits until the link from `from_rank` of an expected epoch has
  // been admitted, and hands it over. DEADLINE_EXCEEDED naming the rank
  // when it does not come by `deadline`; FAILED_PRECONDITION when the
  // epoch is not expected; CANCELLED when it is forgotten meanwhile.
  absl::StatusOr<std::unique_ptr<PeerLink>> Take(const std::string& group,
                                                 uint64_t epoch, int from_rank,
                                                 absl::Time deadline);

 private:
  struct State;
  PeerListener(std::unique_ptr<State> state, int port);

  std::unique_ptr<State> state_;
  const int port_;
};

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_PEER_PEER_LISTENER_H_
