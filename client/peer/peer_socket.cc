#include "client/peer/peer_socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/endpoint.h"

namespace fedgather {

PeerSocket::~PeerSocket() {
  if (fd_ >= 0) ::close(fd_);
}

PeerSocket& PeerSocket::operator=(PeerSocket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void PeerSocket::Shutdown() const {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

namespace {

// Addresses resolves `text` for a listener (`passive`) or a dial.
absl::StatusOr<addrinfo*> Addresses(const std::string& text, bool passive) {
  absl::StatusOr<Endpoint> endpoint = SplitEndpoint(text);
  if (!endpoint.ok()) return endpoint.status();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(endpoint->port);
  if (const int error = ::getaddrinfo(endpoint->host.c_str(), service.c_str(),
                                      &hints, &found);
      error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", text, ": ", gai_strerror(error)));
  }
  return found;
}

PeerSocket NewSocket(int family) {
  return PeerSocket(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                             IPPROTO_TCP));
}

void SetNoDelay(const PeerSocket& socket) {
  const int one = 1;
  ::setsockopt(socket.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

absl::StatusOr<PeerSocket> ListenTcp(const std::string& endpoint) {
  absl::StatusOr<addrinfo*> found = Addresses(endpoint, /*passive=*/true);
  if (!found.ok()) return found.status();
  std::string last_error = "no address";
  for (addrinfo* a = *found; a != nullptr; a = a->ai_next) {
    PeerSocket socket = NewSocket(a->ai_family);
    const int one = 1;
    if (socket.valid() &&
        ::setsockopt(socket.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ==
            0 &&
        ::bind(socket.fd(), a->ai_addr, a->ai_addrlen) == 0 &&
        ::listen(socket.fd(), SOMAXCONN) == 0) {
      ::freeaddrinfo(*found);
      return socket;
    }
    last_error = std::strerror(errno);
  }
  ::freeaddrinfo(*found);
  return absl::UnavailableError(
      absl::StrCat("cannot listen on ", endpoint, ": ", last_error));
}

absl::StatusOr<int> BoundPort(const PeerSocket& socket) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&address),
                    &length) != 0) {
    return absl::InternalError(
        absl::StrCat("getsockname: ", std::strerror(errno)));
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  }
  return ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
}

absl::StatusOr<PeerSocket> ConnectTcp(const std::string& endpoint,
                                      absl::Time deadline) {
  absl::StatusOr<addrinfo*> found = Addresses(endpoint, /*passive=*/false);
  if (!found.ok()) return found.status();
  absl::Status last_error = absl::UnavailableError(
      absl::StrCat("cannot connect to ", endpoint, ": no address"));
  for (addrinfo* a = *found; a != nullptr; a = a->ai_next) {
    PeerSocket socket = NewSocket(a->ai_family);
    if (!socket.valid()) continue;
    if (::connect(socket.fd(), a->ai_addr, a->ai_addrlen) != 0 &&
        errno != EINPROGRESS) {
      last_error = absl::UnavailableError(absl::StrCat(
          "cannot connect to ", endpoint, ": ", std::strerror(errno)));
      continue;
    }
    absl::Status ready = WaitFor(socket.fd(), POLLOUT, deadline,
                                 absl::StrCat("connecting to ", endpoint));
    if (!ready.ok()) {
      ::freeaddrinfo(*found);
      return ready;
    }
    int error = 0;
    socklen_t length = sizeof error;
    ::getsockopt(socket.fd(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      last_error = absl::UnavailableError(absl::StrCat(
          "cannot connect to ", endpoint, ": ", std::strerror(error)));
      continue;
    }
    ::freeaddrinfo(*found);
    SetNoDelay(socket);
    return socket;
  }
  ::freeaddrinfo(*found);
  return last_error;
}

PeerSocket AcceptTcp(const PeerSocket& listener) {
  PeerSocket socket(
      ::accept4(listener.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (socket.valid()) SetNoDelay(socket);
  return socket;
}

absl::Status WaitFor(int fd, short events, absl::Time deadline,
                     const std::string& what) {
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": no progress before the deadline"));
    }
    pollfd one{fd, events, 0};
    const int64_t ms = absl::ToInt64Milliseconds(left) + 1;
    const int ready =
        ::poll(&one, 1, static_cast<int>(std::min<int64_t>(ms, 1 << 30)));
    if (ready > 0) return absl::OkStatus();
    if (ready < 0 && errno != EINTR) {
      return absl::InternalError(
          absl::StrCat(what, ": poll: ", std::strerror(errno)));
    }
  }
}

}  // namespace fedgather
