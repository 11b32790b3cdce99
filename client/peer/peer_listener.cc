#include "client/peer/peer_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/peer/peer_socket.h"
#include "fedgather/v1/fedgather.pb.h"

namespace fedgather {

struct PeerListener::State {
  using EpochKey = std::pair<std::string, uint64_t>;
  struct Epoch {
    int rank = 0;
    std::vector<std::string> identities;
    std::set<int> arrived;  // ranks whose link was admitted (or is being)
    std::map<int, std::unique_ptr<PeerLink>> admitted;  // not taken yet
  };

  std::shared_ptr<const PeerTls> tls;
  PeerListenerOptions options;
  PeerSocket listener;
  int wake[2] = {-1, -1};  // the destructor writes to stop the accepter

  absl::Mutex mu;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  std::deque<PeerSocket> accepted ABSL_GUARDED_BY(mu);
  std::set<int> in_handshake ABSL_GUARDED_BY(mu);  // fds, cut on stop
  std::map<EpochKey, Epoch> epochs ABSL_GUARDED_BY(mu);

  std::thread accepter;
  std::vector<std::thread> handshakers;

  void Accept();
  void Handshakes();
  void Admit(PeerSocket socket);
  // Check says whether `hello` from `identity` may be admitted, and
  // reserves its place; the refusal otherwise.
  absl::Status Check(const v1::PeerLinkHello& hello,
                     const std::string& identity, absl::Time deadline);
  void Refused(const absl::Status& status) {
    if (options.on_refusal) options.on_refusal(status);
  }
};

void PeerListener::State::Accept() {
  for (;;) {
    pollfd fds[2] = {{listener.fd(), POLLIN, 0}, {wake[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) continue;
    if (fds[1].revents != 0) return;
    PeerSocket socket = AcceptTcp(listener);
    if (!socket.valid()) continue;
    absl::MutexLock lock(&mu);
    // Beyond the handshakes that can run and as many waiting, close.
    if (accepted.size() + in_handshake.size() <
        2 * static_cast<size_t>(options.max_handshakes)) {
      accepted.push_back(std::move(socket));
    }
  }
}

void PeerListener::State::Handshakes() {
  for (;;) {
    PeerSocket socket;
    {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(
          +[](State* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
            return s->stopping || !s->accepted.empty();
          },
          this));
      if (stopping) return;
      socket = std::move(accepted.front());
      accepted.pop_front();
      in_handshake.insert(socket.fd());
    }
    const int fd = socket.fd();
    Admit(std::move(socket));
    absl::MutexLock lock(&mu);
    in_handshake.erase(fd);
  }
}

void PeerListener::State::Admit(PeerSocket socket) {
  const absl::Time deadline = absl::Now() + options.handshake_timeout;
  absl::StatusOr<std::unique_ptr<PeerLink>> link =
      tls->Handshake(std::move(socket), PeerTls::Role::kListener, deadline,
                     "an incoming peer link");
  if (!link.ok()) {
    Refused(link.status());
    return;
  }
  v1::PeerLinkHello hello;
  absl::Status status = (*link)->ReceiveMessage(&hello, deadline);
  if (!status.ok()) {
    Refused(status);
    return;
  }
  const std::string identity = (*link)->peer().identity;
  (*link)->set_name(absl::StrCat("the link from rank ", hello.from_rank(),
                                 " ('", identity, "') of group '",
                                 hello.group(), "' epoch ", hello.epoch()));
  const EpochKey key(hello.group(), hello.epoch());
  status = Check(hello, identity, deadline);
  v1::PeerLinkVerdict verdict;
  verdict.set_code(static_cast<int>(status.code()));
  verdict.set_message(std::string(status.message()));
  absl::Status sent = (*link)->SendMessage(verdict, deadline);
  if (!status.ok()) {
    Refused(absl::Status(
        status.code(), absl::StrCat((*link)->name(), ": ", status.message())));
    return;
  }
  absl::MutexLock lock(&mu);
  auto epoch = epochs.find(key);
  if (epoch == epochs.end()) return;  // forgotten meanwhile
  if (!sent.ok()) {                   // the dialer is gone; it may dial again
    epoch->second.arrived.erase(static_cast<int>(hello.from_rank()));
    return;
  }
  epoch->second.admitted[static_cast<int>(hello.from_rank())] =
      *std::move(link);
}

absl::Status PeerListener::State::Check(const v1::PeerLinkHello& hello,
                                        const std::string& identity,
                                        absl::Time deadline) {
  const EpochKey key(hello.group(), hello.epoch());
  absl::MutexLock lock(&mu);
  auto expected = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return stopping || epochs.count(key) > 0;
  };
  mu.AwaitWithDeadline(absl::Condition(&expected), deadline);
  auto epoch = epochs.find(key);
  if (epoch == epochs.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("this member is in no epoch ", hello.epoch(),
                     " of group '", hello.group(), "'"));
  }
  Epoch& e = epoch->second;
  const int world = static_cast<int>(e.identities.size());
  if (static_cast<int>(hello.to_rank()) != e.rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("the hello is for rank ", hello.to_rank(),
                     "; this member is rank ", e.rank));
  }
  if (hello.from_rank() >= static_cast<uint32_t>(world) ||
      static_cast<int>(hello.from_rank()) == e.rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", hello.from_rank(),
                     " is no other member of the epoch (world ", world, ")"));
  }
  const std::string& member = e.identities[hello.from_rank()];
  if (identity != member) {
    return absl::PermissionDeniedError(
        absl::StrCat("the certificate names '", identity, "', but rank ",
                     hello.from_rank(), " of this epoch is '", member, "'"));
  }
  if (!e.arrived.insert(static_cast<int>(hello.from_rank())).second) {
    return absl::AlreadyExistsError(absl::StrCat(
        "rank ", hello.from_rank(), " already has its link in this epoch"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PeerListener>> PeerListener::Start(
    std::shared_ptr<const PeerTls> tls, PeerSocket listening,
    PeerListenerOptions options) {
  auto state = std::make_unique<State>();
  absl::StatusOr<int> port = BoundPort(listening);
  if (!port.ok()) return port.status();
  if (::pipe2(state->wake, O_CLOEXEC) != 0) {
    return absl::InternalError("peer listener: pipe2 failed");
  }
  state->tls = std::move(tls);
  state->listener = std::move(listening);
  state->options = std::move(options);
  State* s = state.get();
  s->accepter = std::thread([s] { s->Accept(); });
  for (int i = 0; i < std::max(1, s->options.max_handshakes); ++i) {
    s->handshakers.emplace_back([s] { s->Handshakes(); });
  }
  return std::unique_ptr<PeerListener>(
      new PeerListener(std::move(state), *port));
}

PeerListener::PeerListener(std::unique_ptr<State> state, int port)
    : state_(std::move(state)), port_(port) {}

PeerListener::~PeerListener() {
  {
    absl::MutexLock lock(&state_->mu);
    state_->stopping = true;
    for (int fd : state_->in_handshake) ::shutdown(fd, SHUT_RDWR);
  }
  const char stop = 0;
  (void)!::write(state_->wake[1], &stop, 1);
  state_->accepter.join();
  for (std::thread& t : state_->handshakers) t.join();
  ::close(state_->wake[0]);
  ::close(state_->wake[1]);
}

void PeerListener::ExpectEpoch(const std::string& group, uint64_t epoch,
                               int rank, std::vector<std::string> identities) {
  absl::MutexLock lock(&state_->mu);
  State::Epoch& e = state_->epochs[State::EpochKey(group, epoch)];
  e.rank = rank;
  e.identities = std::move(identities);
}

void PeerListener::ForgetEpoch(const std::string& group, uint64_t epoch) {
  std::map<int, std::unique_ptr<PeerLink>> dropped;
  absl::MutexLock lock(&state_->mu);
  auto e = state_->epochs.find(State::EpochKey(group, epoch));
  if (e == state_->epochs.end()) return;
  dropped = std::move(e->second.admitted);
  state_->epochs.erase(e);
}

absl::StatusOr<std::unique_ptr<PeerLink>> PeerListener::Take(
    const std::string& group, uint64_t epoch, int from_rank,
    absl::Time deadline) {
  const State::EpochKey key(group, epoch);
  absl::MutexLock lock(&state_->mu);
  if (state_->epochs.count(key) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no epoch ", epoch, " of group '", group, "' is expected here"));
  }
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
    auto e = state_->epochs.find(key);
    return state_->stopping || e == state_->epochs.end() ||
           e->second.admitted.count(from_rank) > 0;
  };
  state_->mu.AwaitWithDeadline(absl::Condition(&ready), deadline);
  auto e = state_->epochs.find(key);
  if (state_->stopping || e == state_->epochs.end()) {
    return absl::CancelledError(absl::StrCat("epoch ", epoch, " of group '",
                                             group, "' ended on this member"));
  }
  auto link = e->second.admitted.find(from_rank);
  if (link == e->second.admitted.end()) {
    return absl::DeadlineExceededError(
        absl::StrCat("the link from rank ", from_rank, " of group '", group,
                     "' epoch ", epoch, " did not come in time"));
  }
  std::unique_ptr<PeerLink> taken = std::move(link->second);
  e->second.admitted.erase(link);
  return taken;
}

}  // namespace fedgather
