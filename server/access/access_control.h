// AccessControl: every check a call passes before it touches a group. It
// holds the server's current access policy and client-certificate verifier
// (CA and CRL), reloads both together, and answers, for each entry point:
// who is calling (Authenticate), may they do this (Authorize), and are they
// within their limits (AcquireStream, AcquireGroup, CheckContribution).
// Every refusal is reported to the event sink (and so audited) with the
// caller's identity, address and reason before it is returned.
//
// Thread safety: thread-safe. The policy and verifier are an immutable
// snapshot swapped under mu_ by Reload; each check reads one snapshot.
#ifndef FEDGATHER_SERVER_ACCESS_ACCESS_CONTROL_H_
#define FEDGATHER_SERVER_ACCESS_ACCESS_CONTROL_H_

#include <grpcpp/security/auth_context.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cert_verifier.h"
#include "common/clock.h"
#include "server/access/access_policy.h"
#include "server/access/identity_usage.h"
#include "server/events/event_sink.h"
#include "server/membership/group_registry.h"

namespace fedgather::server {

// Who is calling: the identity of a verified client certificate and the
// peer's address (as gRPC writes it, e.g. "ipv4:127.0.0.1:40112").
struct Caller {
  std::string identity;
  std::string peer;
  std::string cert_pem;   // the certificate it presented, and any chain,
  std::string chain_pem;  // which a reload verifies again
  // Admitted over plaintext (fedgather-server
  // --insecure-plaintext-for-benchmarks): the identity is the one its
  // request header claims; there is no certificate to verify again.
  bool plaintext = false;
};

// A live session whose certificate each reload verifies again.
class RevocableSession {
 public:
  virtual ~RevocableSession() = default;
  // Revoke ends the session with `status` (UNAUTHENTICATED, saying why).
  // Called on the reloading thread, under no server lock.
  virtual void Revoke(const absl::Status& status) = 0;
};

// A caller admitted to open a stream: who, and the stream it holds of its
// max_concurrent_streams (given back when the lease is destroyed).
struct Admission {
  Caller caller;
  IdentityUsage::Lease stream;
};

struct AccessControlOptions {
  std::string policy_path;    // the YAML policy; re-read by Reload
  std::string client_ca_pem;  // CAs client certificates must chain to
  std::string crl_path;       // PEM CRL file; empty for none; re-read too
  GroupRegistry* registry = nullptr;  // gets each policy's groups
  EventSink* events = nullptr;        // may be null
  Clock* clock = SystemClock();
};

class AccessControl {
 public:
  // Create loads the policy and CRL and applies the policy's groups to the
  // registry. INVALID_ARGUMENT (or the file's error) naming the file.
  static absl::StatusOr<std::unique_ptr<AccessControl>> Create(
      AccessControlOptions options);

  // Reload re-reads the policy and CRL files. When both load they replace
  // the current ones at once and the registry gets the new groups (rounds
  // in flight carry on); otherwise nothing changes and the error is
  // returned. Either way a kPolicyReloaded event names `by` (the admin, or
  // "SIGHUP"). Then every watched session's certificate is verified again,
  // and a session whose certificate no longer verifies (revoked by the new
  // CRL, or expired) is revoked, with an event. Serialized: concurrent
  // reloads run one at a time.
  absl::Status Reload(const Caller& by);

  // RecheckSessions verifies every watched session's certificate again with
  // the current CA and CRL at the current time, and revokes those that no
  // longer verify (expired since they were admitted, or revoked), each with
  // a kAccessDenied event. Reload calls it; the server's timer thread calls
  // it periodically so that a certificate expiring mid-session is cut off.
  void RecheckSessions(absl::string_view when);

  // WatchSession has reloads verify `caller`'s certificate again while
  // `session` lives.
  void WatchSession(const Caller& caller,
                    std::weak_ptr<RevocableSession> session);

  // Authenticate verifies the client certificate of `auth` (which may be
  // null) at the current time. UNAUTHENTICATED with the reason (no
  // certificate, another CA, expired, not yet valid, revoked, not for client
  // auth). `rpc` names the entry point for the event. On a plaintext
  // connection (transport security type "insecure", which only a server
  // started with --insecure-plaintext-for-benchmarks accepts) the identity
  // is the one the caller's header claims (common/plaintext_credentials.h),
  // unverified; UNAUTHENTICATED when it sent none, an empty one or one with
  // a control character.
  absl::StatusOr<Caller> Authenticate(const grpc::AuthContext* auth,
                                      const std::string& peer,
                                      absl::string_view rpc);

  // Authorize checks `action` on `group` against the current policy:
  // PERMISSION_DENIED (AccessPolicy::Authorize) otherwise.
  absl::Status Authorize(const Caller& caller, absl::string_view group,
                         Action action);

  // AdmitStream authenticates the caller of a new stream and holds one of
  // its concurrent streams: Authenticate's errors, or RESOURCE_EXHAUSTED
  // past max_concurrent_streams.
  absl::StatusOr<Admission> AdmitStream(const grpc::AuthContext* auth,
                                        const std::string& peer,
                                        absl::string_view rpc);

  // AcquireGroup holds one of `caller`'s group memberships (a session that
  // joined `group`); RESOURCE_EXHAUSTED past max_groups.
  absl::StatusOr<IdentityUsage::Lease> AcquireGroup(const Caller& caller,
                                                    absl::string_view group);

  // AcquireRound holds one of `caller`'s rounds in flight (a collective
  // stream with a round in `group`); RESOURCE_EXHAUSTED past
  // max_rounds_in_flight.
  absl::StatusOr<IdentityUsage::Lease> AcquireRound(const Caller& caller,
                                                    absl::string_view group);

  // CheckContribution checks a collective header's tensor count and payload
  // bytes against `caller`'s limits; RESOURCE_EXHAUSTED naming the limit,
  // the value and the round (`round`, e.g. "group 'demo' epoch 1 seq 3").
  // The event carries `event` (group, epoch, seq, rank, op) as given.
  absl::Status CheckContribution(const Caller& caller, int tensors,
                                 int64_t bytes, absl::string_view round,
                                 ServerEvent event);

  // DescribeCrl adds the CRL's file, count and next update to `details`
  // (for events), and crl_stale=true when the next update has passed; nothing
  // without a CRL.
  void DescribeCrl(
      std::vector<std::pair<std::string, std::string>>* details) const;

  // policy returns the current policy.
  std::shared_ptr<const AccessPolicy> policy() const;
  // crl_pem returns the current CRL file's text (empty without one): what
  // members' peer links check certificates against (Joined.peer_crl).
  std::string crl_pem() const;

  EventSink* events() const { return options_.events; }

 private:
  struct Snapshot {
    std::shared_ptr<const AccessPolicy> policy;
    std::shared_ptr<const ClientCertVerifier> verifier;
    std::string crl_pem;  // what `verifier` was made with
  };
  explicit AccessControl(AccessControlOptions options);
  absl::StatusOr<Snapshot> LoadSnapshot() const;
  void AddCrlDetails(
      const ClientCertVerifier& verifier,
      std::vector<std::pair<std::string, std::string>>* details) const;
  Snapshot Current() const;
  void Report(ServerEvent event);
  absl::StatusOr<IdentityUsage::Lease> Acquire(const Caller& caller,
                                               IdentityUsage::Resource resource,
                                               absl::string_view action,
                                               absl::string_view group);

  // RecheckWith revokes the watched sessions whose certificates `verifier`
  // refuses now; `when` goes into the events.
  void RecheckWith(const ClientCertVerifier& verifier, absl::string_view when);

  const AccessControlOptions options_;
  IdentityUsage usage_;
  struct Watched {
    Caller caller;
    std::weak_ptr<RevocableSession> session;
  };
  absl::Mutex watch_mu_;
  std::vector<Watched> watched_ ABSL_GUARDED_BY(watch_mu_);
  absl::Mutex reload_mu_;  // serializes Reload; taken before mu_
  mutable absl::Mutex mu_;
  Snapshot current_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_ACCESS_ACCESS_CONTROL_H_
