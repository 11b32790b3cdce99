// Client: a connection to a fedgather-server over mutual TLS, from which
// this participant joins groups.
//
//   auto client = fedgather::Client::Connect({.server_address = "host:port",
//                                             .tls = *ReadTlsDir(dir)});
//   auto group = (*client)->Join({.group = "demo", .world_size = 4});
//   // client/torch/torch_collectives.h:
//   auto gathered = client::torch::AllGather(**group, tensor);  // [4, ...]
//
// Thread safety: a Client may be used from several threads; each Group it
// returns is independent. The Client must outlive its Groups.
#ifndef FEDGATHER_CLIENT_CLIENT_H_
#define FEDGATHER_CLIENT_CLIENT_H_

#include <grpcpp/channel.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/group.h"
#include "common/clock.h"
#include "common/tls_credentials.h"
#include "fedgather/v1/fedgather.grpc.pb.h"

namespace fedgather {

struct ClientOptions {
  std::string
      server_address;  // HOST:PORT; the server certificate must name HOST
  TlsFiles tls;        // this participant's cert, key and the CA
  // The time source of the client and its groups (common/clock.h); must
  // outlive them.
  Clock* clock = SystemClock();
};

struct JoinOptions {
  std::string group;
  int world_size = 0;
  std::optional<int> rank;  // unset: the server assigns by sorted identity
  // How long to wait for every member to join.
  absl::Duration timeout = absl::Minutes(5);
  // How long Join keeps trying, with backoff, to reach a server it cannot
  // connect to (nothing listening yet, a connection closed before the TLS
  // handshake finished) before it returns UNAVAILABLE. Within `timeout`.
  // An answer from the server, refusals included, is never retried, nor a
  // server certificate this client rejects (wrong CA or name), nor a
  // certificate of this client's that the server's handshake refuses
  // (UNAUTHENTICATED, client/handshake_refusal.h).
  absl::Duration connect_timeout = absl::Seconds(30);
  // When the session to the server breaks (not when the server ends it),
  // the member reconnects and takes its rank again within this grace, with
  // backoff; collectives in flight resume too. Zero: a break leaves the
  // group. The server's --resume-grace bounds it too.
  absl::Duration resume_grace = absl::Seconds(10);
  // The direct data plane (docs/protocol.md, "Peer links"): where this
  // member accepts its peers' links, HOST:PORT (port 0 picks a free one).
  // Empty: it offers no endpoint, and its epochs run on the relay. The
  // group's policy may restrict the endpoints offered (peer_networks).
  std::string peer_listen;
  // The endpoint the other members dial, HOST:PORT (behind NAT, a port
  // mapping or a Service name). Empty: peer_listen's host with the bound
  // port, which must then not be a wildcard (0.0.0.0, ::).
  std::string peer_advertise;
};

class Client {
 public:
  // Connect prepares a channel; it does not block. Connection and TLS
  // failures surface from the calls as UNAVAILABLE, except that a call that
  // fails because this client's certificate cannot pass the server's TLS
  // handshake (expired, not yet valid, not issued by the CA in tls.ca_pem,
  // not for client authentication) is UNAUTHENTICATED naming why
  // (client/handshake_refusal.h). INVALID_ARGUMENT for empty options.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(
      const ClientOptions& options);

  // Join blocks until the group has formed (every member joined and ranks
  // are assigned) and returns this member's Group. Errors from the server:
  // PERMISSION_DENIED (not a member, or no such group), INVALID_ARGUMENT
  // (world size or rank), ALREADY_EXISTS (rank taken), FAILED_PRECONDITION
  // (group full), DEADLINE_EXCEEDED (did not form in time), UNAUTHENTICATED
  // (the server refuses this client's certificate, in the handshake or on
  // the call), UNAVAILABLE (no connection or failed TLS handshake for
  // connect_timeout). With peer_listen: INVALID_ARGUMENT for a malformed or
  // undialable peer address, UNAVAILABLE when it cannot be bound (both
  // before anything is sent), and the server's PERMISSION_DENIED for an
  // endpoint outside the group's peer_networks.
  absl::StatusOr<std::unique_ptr<Group>> Join(const JoinOptions& options);

  // The Admin service. Each blocks for one call of at most `timeout`.
  // GetStatus reports `group` (empty: every group this identity has a role
  // in); AbortRound aborts `group`'s rounds in flight (its admins only);
  // ReloadPolicy makes the server re-read its policy and CRL (server admins
  // only). Errors: UNAUTHENTICATED (the server refuses the certificate),
  // PERMISSION_DENIED (the policy does not allow it), UNAVAILABLE.
  absl::StatusOr<v1::StatusReply> GetStatus(
      const std::string& group, absl::Duration timeout = absl::Seconds(30));
  absl::StatusOr<v1::AbortRoundReply> AbortRound(
      const std::string& group, const std::string& reason,
      absl::Duration timeout = absl::Seconds(30));
  absl::StatusOr<v1::ReloadPolicyReply> ReloadPolicy(
      absl::Duration timeout = absl::Seconds(30));

  // CheckHealth asks the server's standard health service
  // (grpc.health.v1.Health/Check, the whole server) whether it is serving.
  // OK when it answers SERVING; UNAVAILABLE naming the status it answered
  // otherwise (NOT_SERVING while it stops); the call's error when there is
  // no answer (UNAVAILABLE, DEADLINE_EXCEEDED, UNAUTHENTICATED when this
  // client's certificate cannot pass the handshake). Blocks for at most
  // `timeout`.
  absl::Status CheckHealth(absl::Duration timeout = absl::Seconds(5));

 private:
  Client(std::string address, TlsFiles tls,
         std::shared_ptr<grpc::Channel> channel, Clock* clock);

  const std::string address_;
  const TlsFiles tls_;  // also the peer links' (JoinOptions::peer_listen)
  std::shared_ptr<grpc::Channel> channel_;
  Clock* const clock_;
};

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_CLIENT_H_
