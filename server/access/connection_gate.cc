#include "server/access/connection_gate.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace fedgather::server {
namespace {

// How long the gate waits before accepting again when out of fds.
constexpr absl::Duration kNoFdsBackoff = absl::Milliseconds(100);
// How many addresses a report names.
constexpr size_t kAddressesReported = 5;

const char* LimitName(int limit) {
  static const char* const kNames[] = {"per_address", "total", "no_fds"};
  return kNames[limit];
}

// NumericAddress is the IP of `peer`, an IPv4-mapped IPv6 one as IPv4.
std::string NumericAddress(const sockaddr_storage& peer) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (peer.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&peer);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
  } else if (peer.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&peer);
    if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
      inet_ntop(AF_INET, &v6->sin6_addr.s6_addr[12], text, sizeof text);
    } else {
      inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    }
  }
  return text;
}

// Listen binds a listening socket to `address` (of `length` bytes); on
// success *port is its port. `dual_stack` lets an IPv6 wildcard take IPv4.
absl::StatusOr<int> Listen(const sockaddr* address, socklen_t length,
                           bool dual_stack, const std::string& name) {
  const int fd = ::socket(address->sa_family,
                          SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", name, ": socket: ", strerror(errno)));
  }
  const int one = 1, zero = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (address->sa_family == AF_INET6) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, dual_stack ? &zero : &one,
                 sizeof one);
  }
  if (::bind(fd, address, length) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    const int error = errno;
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", name, ": ", strerror(error)));
  }
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  return ntohs(bound.ss_family == AF_INET6
                   ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                   : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

// BindAll binds every address `host` stands for on `port` (the port the
// first one got, when `port` is 0) and returns the sockets.
absl::StatusOr<std::vector<int>> BindAll(const std::string& host, int port,
                                         const std::string& name) {
  std::vector<int> fds;
  if (host.empty() || host == "0.0.0.0" || host == "::") {
    sockaddr_in6 any6{};
    any6.sin6_family = AF_INET6;
    any6.sin6_addr = in6addr_any;
    any6.sin6_port = htons(static_cast<uint16_t>(port));
    absl::StatusOr<int> fd =
        Listen(reinterpret_cast<sockaddr*>(&any6), sizeof any6, true, name);
    if (!fd.ok()) {  // no IPv6 on this host
      sockaddr_in any4{};
      any4.sin_family = AF_INET;
      any4.sin_addr.s_addr = htonl(INADDR_ANY);
      any4.sin_port = htons(static_cast<uint16_t>(port));
      fd = Listen(reinterpret_cast<sockaddr*>(&any4), sizeof any4, false, name);
    }
    if (!fd.ok()) return fd.status();
    return std::vector<int>{*fd};
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (const int error =
          ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
      error != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot listen on ", name, ": ", gai_strerror(error)));
  }
  absl::Status first_error;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (!fds.empty()) {  // the others take the first one's port
      const uint16_t chosen = htons(static_cast<uint16_t>(BoundPort(fds[0])));
      if (a->ai_family == AF_INET6) {
        reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_port = chosen;
      } else {
        reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_port = chosen;
      }
    }
    absl::StatusOr<int> fd = Listen(a->ai_addr, a->ai_addrlen, false, name);
    if (fd.ok()) {
      fds.push_back(*fd);
    } else if (first_error.ok()) {
      first_error = fd.status();
    }
  }
  ::freeaddrinfo(found);
  if (fds.empty()) return first_error;
  return fds;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ConnectionGate>> ConnectionGate::Bind(
    ConnectionGateOptions options) {
  if (options.max_total < 1 || options.max_per_address < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the connection caps must be at least 1 (total ", options.max_total,
        ", per address ", options.max_per_address, ")"));
  }
  const std::string& listen = options.listen_address;
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the listen address must be HOST:PORT (port 0 picks one), not '",
        listen, "'"));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  absl::StatusOr<std::vector<int>> listeners = BindAll(host, port, listen);
  if (!listeners.ok()) return listeners.status();
  const int bound = BoundPort(listeners->front());
  std::unique_ptr<ConnectionGate> gate(
      new ConnectionGate(std::move(options), *std::move(listeners), bound));
  if (::pipe2(gate->wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(
        absl::StrCat("connection gate: pipe2: ", strerror(errno)));
  }
  return gate;
}

ConnectionGate::ConnectionGate(ConnectionGateOptions options,
                               std::vector<int> listeners, int port)
    : options_(std::move(options)),
      listeners_(std::move(listeners)),
      port_(port) {}

ConnectionGate::~ConnectionGate() {
  Stop();
  for (int fd : wake_) {
    if (fd >= 0) ::close(fd);
  }
}

void ConnectionGate::Start(
    std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor) {
  acceptor_ = std::move(acceptor);
  thread_ = std::thread([this] { Run(); });
}

void ConnectionGate::Stop() {
  if (thread_.joinable()) {
    const char byte = 0;
    while (::write(wake_[1], &byte, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
  }
  for (int fd : listeners_) ::close(fd);
  listeners_.clear();
}

void ConnectionGate::Run() {
  std::vector<pollfd> polled;
  polled.push_back({wake_[0], POLLIN, 0});
  for (int fd : listeners_) polled.push_back({fd, POLLIN, 0});
  bool backing_off = false;
  for (;;) {
    const absl::Time now = options_.clock->Now();
    absl::Duration wait = absl::InfiniteDuration();
    if (window_start_ != absl::InfinitePast()) wait = next_report_ - now;
    if (backing_off) wait = std::min(wait, kNoFdsBackoff);
    // While backing off, only the wake pipe is watched.
    const nfds_t count = backing_off ? 1 : polled.size();
    const int timeout_ms =
        wait == absl::InfiniteDuration()
            ? -1
            : static_cast<int>(std::max<int64_t>(
                  0, absl::ToInt64Milliseconds(wait + absl::Milliseconds(1))));
    const int ready = ::poll(polled.data(), count, timeout_ms);
    if (ready < 0 && errno != EINTR) return;  // cannot happen with valid fds
    if (polled[0].revents != 0) return;       // Stop
    backing_off = false;
    for (size_t i = 1; i < count; ++i) {
      if (polled[i].revents != 0 && !AcceptAll(polled[i].fd)) {
        backing_off = true;
      }
    }
    if (const absl::Time after = options_.clock->Now(); after >= next_report_) {
      Report(after);
    }
  }
}

bool ConnectionGate::AcceptAll(int listener) {
  for (;;) {
    sockaddr_storage peer{};
    socklen_t length = sizeof peer;
    const int fd = ::accept4(listener, reinterpret_cast<sockaddr*>(&peer),
                             &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      Admit(fd, NumericAddress(peer));
      continue;
    }
    switch (errno) {
      case EINTR:
      case ECONNABORTED:
      case EPROTO:
        continue;
      case EMFILE:
      case ENFILE:
      case ENOBUFS:
      case ENOMEM:
        // The connection stays in the backlog until fds are free again.
        Refuse(-1, "", kNoFds);
        return false;
      default:  // EAGAIN: none left
        return true;
    }
  }
}

void ConnectionGate::Admit(int fd, const std::string& address) {
  if (open_->CountFrom(address) >= options_.max_per_address) {
    Refuse(fd, address, kPerAddress);
    return;
  }
  if (open_->Tracked() >= options_.max_total &&
      open_->Count() >= options_.max_total) {
    Refuse(fd, address, kTotal);
    return;
  }
  if (!open_->Add(fd, address).ok()) {  // fstat of a socket we hold
    ::close(fd);
    return;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters
      connection;
  connection.listener_fd = listeners_.front();
  connection.fd = fd;
  acceptor_->HandleNewConnection(&connection);
}

void ConnectionGate::Refuse(int fd, const std::string& address, Limit limit) {
  if (fd >= 0) ::close(fd);
  if (options_.metrics != nullptr) {
    options_.metrics->ConnectionRefused(LimitName(limit));
  }
  const absl::Time now = options_.clock->Now();
  if (window_start_ == absl::InfinitePast()) window_start_ = now;
  ++refused_[limit];
  if (!address.empty()) ++refused_by_address_[address];
  if (now >= next_report_) Report(now);
}

void ConnectionGate::Report(absl::Time now) {
  if (window_start_ == absl::InfinitePast()) return;
  int64_t total = 0;
  for (int64_t n : refused_) total += n;
  std::vector<std::pair<int64_t, std::string>> addresses;
  for (const auto& [address, n] : refused_by_address_) {
    addresses.emplace_back(n, address);
  }
  std::sort(addresses.rbegin(), addresses.rend());
  std::vector<std::string> most;
  for (size_t i = 0; i < addresses.size() && i < kAddressesReported; ++i) {
    most.push_back(
        absl::StrCat(addresses[i].second, " (", addresses[i].first, ")"));
  }
  ServerEvent event;
  event.kind = EventKind::kConnectionsRefused;
  event.status = absl::ResourceExhaustedError(absl::StrCat(
      "refused ", total, " connection(s) in the last ",
      absl::FormatDuration(
          absl::Trunc(now - window_start_, absl::Milliseconds(1))),
      ": ", refused_[kPerAddress], " over the cap per address (",
      options_.max_per_address, " open), ", refused_[kTotal],
      " over the total cap (", options_.max_total, " open), ", refused_[kNoFds],
      " for want of file descriptors; most refused: ",
      most.empty() ? "-" : absl::StrJoin(most, ", ")));
  event.details = {
      {"refused", absl::StrCat(total)},
      {"per_address", absl::StrCat(refused_[kPerAddress])},
      {"total", absl::StrCat(refused_[kTotal])},
      {"no_fds", absl::StrCat(refused_[kNoFds])},
      {"addresses", absl::StrCat(addresses.size())},
      {"most_refused", absl::StrJoin(most, ", ")},
      {"max_connections", absl::StrCat(options_.max_total)},
      {"max_connections_per_address", absl::StrCat(options_.max_per_address)}};
  for (int64_t& n : refused_) n = 0;
  refused_by_address_.clear();
  window_start_ = absl::InfinitePast();
  next_report_ = now + options_.report_period;
  if (options_.events != nullptr) options_.events->OnEvent(event);
}

}  // namespace fedgather::server
