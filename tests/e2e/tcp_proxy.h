// TcpProxy: a loopback TCP forwarder the test controls, to break real
// connections. It listens on 127.0.0.1:0 and forwards every connection to a
// target port; Cut closes every connection it carries now (both sides, as a
// network failure would), and CutAfterUpstreamBytes arms a cut for when that
// many more client-to-server bytes have passed. New connections are
// accepted as before, so clients can reconnect; RefuseConnections closes the
// next N at once instead, as a server that is not up yet would. Stall stops
// every byte while keeping the connections open, as a hung server would.
#ifndef FEDGATHER_TESTS_E2E_TCP_PROXY_H_
#define FEDGATHER_TESTS_E2E_TCP_PROXY_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace fedgather::testing {

class TcpProxy {
 public:
  explicit TcpProxy(int target_port);
  ~TcpProxy();

  // The address clients connect to: "127.0.0.1:PORT".
  std::string address() const;
  // Cut closes every connection carried now; returns how many.
  int Cut();
  void CutAfterUpstreamBytes(int64_t bytes);
  int cuts() const { return cuts_.load(); }
  // The bytes carried so far to the server (upstream) and back, over
  // every connection.
  int64_t upstream_bytes() const { return upstream_bytes_.load(); }
  int64_t downstream_bytes() const { return downstream_bytes_.load(); }
  // RefuseConnections closes the next `n` new connections before they
  // carry a byte; refused() counts those closed so far.
  void RefuseConnections(int n) { refuse_next_ = n; }
  int refused() const { return refused_.load(); }
  // Stall stops forwarding, both ways, on every connection (those carried
  // now and new ones) and keeps them open: the server looks hung, as a
  // stopped process or a network that drops everything makes it. A side
  // that closes is still closed through. Unstall forwards again.
  void Stall() { stalled_ = true; }
  void Unstall() { stalled_ = false; }

 private:
  struct Link {
    int client;
    int server;
  };
  void Accept();
  void Pump(Link link);

  const int target_port_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> cut_after_ = -1;  // upstream bytes left before a cut
  std::atomic<int> cuts_{0};
  std::atomic<int64_t> upstream_bytes_{0};
  std::atomic<int64_t> downstream_bytes_{0};
  std::atomic<int> refuse_next_{0};
  std::atomic<int> refused_{0};
  std::atomic<bool> stalled_{false};
  std::thread acceptor_;
  absl::Mutex mu_;
  std::vector<Link> links_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> pumps_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedgather::testing

#endif  // FEDGATHER_TESTS_E2E_TCP_PROXY_H_
