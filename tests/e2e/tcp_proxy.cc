#include "tests/e2e/tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace fedgather::testing {
namespace {

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

}  // namespace

TcpProxy::TcpProxy(int target_port) : target_port_(target_port) {
  listener_ = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = Loopback(0);
  bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  listen(listener_, 64);
  socklen_t len = sizeof addr;
  getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { Accept(); });
}

TcpProxy::~TcpProxy() {
  stopping_ = true;
  shutdown(listener_, SHUT_RDWR);
  acceptor_.join();
  close(listener_);
  Cut();
  std::vector<std::thread> pumps;
  {
    absl::MutexLock lock(&mu_);
    pumps.swap(pumps_);
  }
  for (std::thread& pump : pumps) pump.join();
}

std::string TcpProxy::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

void TcpProxy::Accept() {
  while (!stopping_) {
    const int client = accept(listener_, nullptr, nullptr);
    if (client < 0) return;
    if (refuse_next_.load() > 0) {
      --refuse_next_;
      ++refused_;
      close(client);
      continue;
    }
    const int server = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in target = Loopback(target_port_);
    if (connect(server, reinterpret_cast<sockaddr*>(&target), sizeof target) !=
        0) {
      close(client);
      close(server);
      continue;
    }
    absl::MutexLock lock(&mu_);
    const Link link{client, server};
    links_.push_back(link);
    pumps_.emplace_back([this, link] { Pump(link); });
  }
}

void TcpProxy::Pump(Link link) {
  pollfd fds[2] = {{link.client, POLLIN, 0}, {link.server, POLLIN, 0}};
  char buffer[64 << 10];
  for (;;) {
    // Stalled, only a hang-up or an error is polled for (they close).
    const bool stalled = stalled_.load();
    fds[0].events = fds[1].events = stalled ? 0 : POLLIN;
    if (poll(fds, 2, 100) < 0) break;
    bool closed = false;
    for (int side = 0; side < 2 && !closed; ++side) {
      if ((fds[side].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      if (stalled) {
        closed = true;
        break;
      }
      const ssize_t n = read(fds[side].fd, buffer, sizeof buffer);
      if (n <= 0) {
        closed = true;
        break;
      }
      if (side == 0 && cut_after_.load() >= 0 &&
          cut_after_.fetch_sub(n) - n < 0) {
        cut_after_ = -1;
        Cut();  // a network failure mid-transfer
        closed = true;
        break;
      }
      (side == 0 ? upstream_bytes_ : downstream_bytes_) += n;
      const int to = side == 0 ? link.server : link.client;
      for (ssize_t sent = 0; sent < n;) {
        // MSG_NOSIGNAL: a peer closed by a cut must not raise SIGPIPE.
        const ssize_t w = send(to, buffer + sent, n - sent, MSG_NOSIGNAL);
        if (w <= 0) {
          closed = true;
          break;
        }
        sent += w;
      }
    }
    if (closed) break;
  }
  absl::MutexLock lock(&mu_);
  auto it = std::find_if(links_.begin(), links_.end(), [&](const Link& l) {
    return l.client == link.client;
  });
  if (it != links_.end()) {
    shutdown(link.client, SHUT_RDWR);
    shutdown(link.server, SHUT_RDWR);
    links_.erase(it);
  }
  close(link.client);
  close(link.server);
}

int TcpProxy::Cut() {
  absl::MutexLock lock(&mu_);
  for (const Link& link : links_) {
    shutdown(link.client, SHUT_RDWR);
    shutdown(link.server, SHUT_RDWR);
  }
  const int n = static_cast<int>(links_.size());
  links_.clear();
  if (n > 0) ++cuts_;
  return n;
}

void TcpProxy::CutAfterUpstreamBytes(int64_t bytes) { cut_after_ = bytes; }

}  // namespace fedgather::testing
