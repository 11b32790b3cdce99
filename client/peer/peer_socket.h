// PeerSocket: the TCP sockets under the direct data plane's peer links
// (docs/protocol.md, "Peer links"): a listening socket, a dial with a
// deadline, and waiting for readiness with a deadline. Every socket is
// non-blocking and close-on-exec; connected ones have TCP_NODELAY.
//
// Endpoints are "HOST:PORT" as common/endpoint.h reads them; HOST may be a
// name, resolved with getaddrinfo.
#ifndef FEDGATHER_CLIENT_PEER_PEER_SOCKET_H_
#define FEDGATHER_CLIENT_PEER_PEER_SOCKET_H_

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace fedgather {

// An owned file descriptor, closed on destruction. Movable, not copyable.
class PeerSocket {
 public:
  PeerSocket() = default;
  explicit PeerSocket(int fd) : fd_(fd) {}
  ~PeerSocket();
  PeerSocket(PeerSocket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  PeerSocket& operator=(PeerSocket&& other) noexcept;
  PeerSocket(const PeerSocket&) = delete;
  PeerSocket& operator=(const PeerSocket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

  // Shutdown ends both directions (shutdown(2)) without closing the
  // descriptor, so that a thread waiting on it wakes; safe to call from
  // any thread while another uses the socket.
  void Shutdown() const;

 private:
  int fd_ = -1;
};

// ListenTcp binds and listens on `endpoint` (port 0: any free port).
// INVALID_ARGUMENT for a malformed endpoint; UNAVAILABLE naming the
// endpoint and the system's reason when it cannot be resolved or bound.
absl::StatusOr<PeerSocket> ListenTcp(const std::string& endpoint);

// BoundPort returns the local port of a bound socket.
absl::StatusOr<int> BoundPort(const PeerSocket& socket);

// ConnectTcp connects to `endpoint`, trying each address it resolves to,
// until `deadline`. UNAVAILABLE naming the endpoint and the reason when no
// address accepts, DEADLINE_EXCEEDED when the deadline passes first.
absl::StatusOr<PeerSocket> ConnectTcp(const std::string& endpoint,
                                      absl::Time deadline);

// AcceptTcp accepts one connection from a listening socket, without
// waiting: an invalid socket when none is pending.
PeerSocket AcceptTcp(const PeerSocket& listener);

// WaitFor waits until `fd` is ready for `events` (POLLIN, POLLOUT) or the
// peer hung up. DEADLINE_EXCEEDED when `deadline` passes first; `what`
// names the wait in the message.
absl::Status WaitFor(int fd, short events, absl::Time deadline,
                     const std::string& what);

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_PEER_PEER_SOCKET_H_
