#include "server/access/access_control.h"

#include <grpc/grpc_security_constants.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/plaintext_credentials.h"
#include "common/status_macros.h"

namespace fedgather::server {
namespace {

std::string Property(const grpc::AuthContext* auth, const char* name) {
  if (auth == nullptr) return "";
  std::vector<grpc::string_ref> values = auth->FindPropertyValues(name);
  if (values.empty()) return "";
  return std::string(values.front().data(), values.front().size());
}

// PlaintextCaller is Authenticate on a plaintext connection.
absl::StatusOr<Caller> PlaintextCaller(const grpc::AuthContext* auth,
                                       const std::string& peer) {
  std::vector<grpc::string_ref> values =
      auth->FindPropertyValues(kPlaintextIdentityProperty);
  if (values.empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat("a plaintext call must name its identity in the ",
                     kPlaintextIdentityHeader, " header"));
  }
  std::string identity(values.front().data(), values.front().size());
  const bool control = std::any_of(
      identity.begin(), identity.end(),
      [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
  if (identity.empty() || control) {
    return absl::UnauthenticatedError(
        absl::StrCat("the ", kPlaintextIdentityHeader,
                     " header is empty or holds a control character"));
  }
  Caller caller;
  caller.identity = std::move(identity);
  caller.peer = peer;
  caller.plaintext = true;
  return caller;
}

}  // namespace

AccessControl::AccessControl(AccessControlOptions options)
    : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<AccessControl>> AccessControl::Create(
    AccessControlOptions options) {
  std::unique_ptr<AccessControl> control(new AccessControl(std::move(options)));
  FG_ASSIGN_OR_RETURN(Snapshot snapshot, control->LoadSnapshot());
  PendingCallbacks callbacks;
  control->options_.registry->ApplyPolicy(snapshot.policy->GroupConfigs(),
                                          &callbacks);
  absl::MutexLock lock(&control->mu_);
  control->current_ = std::move(snapshot);
  return control;
}

absl::StatusOr<AccessControl::Snapshot> AccessControl::LoadSnapshot() const {
  FG_ASSIGN_OR_RETURN(AccessPolicy policy,
                      AccessPolicy::Load(options_.policy_path));
  std::string crl_pem;
  if (!options_.crl_path.empty()) {
    FG_ASSIGN_OR_RETURN(crl_pem, ReadFileToString(options_.crl_path));
  }
  absl::StatusOr<std::unique_ptr<ClientCertVerifier>> verifier =
      ClientCertVerifier::Create(options_.client_ca_pem, crl_pem);
  if (!verifier.ok()) {
    return absl::Status(
        verifier.status().code(),
        absl::StrCat(
            options_.crl_path.empty() ? "the client CA" : options_.crl_path,
            ": ", verifier.status().message()));
  }
  Snapshot snapshot;
  snapshot.policy = std::make_shared<const AccessPolicy>(std::move(policy));
  snapshot.verifier = *std::move(verifier);
  snapshot.crl_pem = std::move(crl_pem);
  return snapshot;
}

AccessControl::Snapshot AccessControl::Current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

std::shared_ptr<const AccessPolicy> AccessControl::policy() const {
  return Current().policy;
}

std::string AccessControl::crl_pem() const {
  absl::MutexLock lock(&mu_);
  return current_.crl_pem;
}

void AccessControl::Report(ServerEvent event) {
  if (options_.events != nullptr) options_.events->OnEvent(event);
}

absl::Status AccessControl::Reload(const Caller& by) {
  absl::MutexLock reload_lock(&reload_mu_);
  ServerEvent event;
  event.kind = EventKind::kPolicyReloaded;
  event.identity = by.identity;
  event.peer = by.peer;
  event.details.emplace_back("policy", options_.policy_path);
  absl::StatusOr<Snapshot> loaded = LoadSnapshot();
  if (!loaded.ok()) {
    event.status = absl::Status(
        loaded.status().code(),
        absl::StrCat("the policy was not reloaded; the old one stays in "
                     "force: ",
                     loaded.status().message()));
    Report(event);
    return event.status;
  }
  event.details.emplace_back("policy_sha256", loaded->policy->sha256());
  AddCrlDetails(*loaded->verifier, &event.details);
  {
    PendingCallbacks callbacks;  // runs after both locks below are released
    {
      absl::MutexLock lock(&mu_);
      current_ = *loaded;
    }
    options_.registry->ApplyPolicy(loaded->policy->GroupConfigs(), &callbacks);
  }
  Report(event);
  RecheckWith(*loaded->verifier, "policy reload");
  return absl::OkStatus();
}

void AccessControl::AddCrlDetails(
    const ClientCertVerifier& verifier,
    std::vector<std::pair<std::string, std::string>>* details) const {
  if (options_.crl_path.empty()) return;
  details->emplace_back("crl", options_.crl_path);
  details->emplace_back("crl_count", absl::StrCat(verifier.crl_count()));
  const absl::Time next_update = verifier.crl_next_update();
  if (next_update == absl::InfiniteFuture()) return;
  details->emplace_back(
      "crl_next_update",
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", next_update, absl::UTCTimeZone()));
  // A stale CRL is still honoured; the operator should issue a new one.
  if (next_update < options_.clock->Now())
    details->emplace_back("crl_stale", "true");
}

void AccessControl::DescribeCrl(
    std::vector<std::pair<std::string, std::string>>* details) const {
  AddCrlDetails(*Current().verifier, details);
}

void AccessControl::WatchSession(const Caller& caller,
                                 std::weak_ptr<RevocableSession> session) {
  absl::MutexLock lock(&watch_mu_);
  watched_.erase(
      std::remove_if(watched_.begin(), watched_.end(),
                     [](const Watched& w) { return w.session.expired(); }),
      watched_.end());
  watched_.push_back(Watched{caller, std::move(session)});
}

void AccessControl::RecheckSessions(absl::string_view when) {
  RecheckWith(*Current().verifier, when);
}

void AccessControl::RecheckWith(const ClientCertVerifier& verifier,
                                absl::string_view when) {
  std::vector<std::pair<std::shared_ptr<RevocableSession>, ServerEvent>>
      revoked;
  {
    absl::MutexLock lock(&watch_mu_);
    const absl::Time now = options_.clock->Now();
    for (auto it = watched_.begin(); it != watched_.end();) {
      std::shared_ptr<RevocableSession> session = it->session.lock();
      absl::Status still = absl::OkStatus();
      if (session != nullptr && !it->caller.plaintext) {
        still = verifier.Verify(it->caller.cert_pem, it->caller.chain_pem, now)
                    .status();
      }
      if (session != nullptr && still.ok()) {
        ++it;
        continue;
      }
      if (session != nullptr) {
        ServerEvent denied;
        denied.kind = EventKind::kAccessDenied;
        denied.action = "authenticate";
        denied.identity = it->caller.identity;
        denied.peer = it->caller.peer;
        denied.details = {{"rpc", "Session"}, {"when", std::string(when)}};
        denied.status = still;
        revoked.emplace_back(std::move(session), std::move(denied));
      }
      it = watched_.erase(it);
    }
  }
  for (auto& [session, event] : revoked) {
    Report(event);
    session->Revoke(event.status);
  }
}

absl::StatusOr<Caller> AccessControl::Authenticate(
    const grpc::AuthContext* auth, const std::string& peer,
    absl::string_view rpc) {
  if (Property(auth, GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME) ==
      "insecure") {
    absl::StatusOr<Caller> caller = PlaintextCaller(auth, peer);
    if (caller.ok()) return caller;
    ServerEvent denied;
    denied.kind = EventKind::kAccessDenied;
    denied.action = "authenticate";
    denied.peer = peer;
    denied.details = {{"rpc", std::string(rpc)}, {"transport", "plaintext"}};
    denied.status = caller.status();
    Report(std::move(denied));
    return caller.status();
  }
  const std::string cert = Property(auth, GRPC_X509_PEM_CERT_PROPERTY_NAME);
  const std::string chain =
      Property(auth, GRPC_X509_PEM_CERT_CHAIN_PROPERTY_NAME);
  absl::StatusOr<VerifiedCertificate> verified =
      Current().verifier->Verify(cert, chain, options_.clock->Now());
  if (verified.ok()) return Caller{verified->identity, peer, cert, chain};
  ServerEvent denied;
  denied.kind = EventKind::kAccessDenied;
  denied.action = "authenticate";
  denied.peer = peer;
  denied.details.emplace_back("rpc", std::string(rpc));
  // The identity the certificate claims, unverified: worth recording.
  denied.identity = ClaimedIdentity(cert);
  if (!denied.identity.empty()) {
    denied.details.emplace_back("identity_verified", "false");
  }
  denied.status = verified.status();
  Report(std::move(denied));
  return verified.status();
}

absl::Status AccessControl::Authorize(const Caller& caller,
                                      absl::string_view group, Action action) {
  absl::Status allowed =
      Current().policy->Authorize(caller.identity, group, action);
  if (allowed.ok()) return allowed;
  ServerEvent denied;
  denied.kind = EventKind::kAccessDenied;
  denied.action = ActionName(action);
  denied.group = std::string(group);
  denied.identity = caller.identity;
  denied.peer = caller.peer;
  denied.status = allowed;
  Report(std::move(denied));
  return allowed;
}

absl::StatusOr<IdentityUsage::Lease> AccessControl::Acquire(
    const Caller& caller, IdentityUsage::Resource resource,
    absl::string_view action, absl::string_view group) {
  const IdentityLimits limits = Current().policy->LimitsFor(caller.identity);
  const int limit = resource == IdentityUsage::Resource::kStreams
                        ? limits.max_concurrent_streams
                    : resource == IdentityUsage::Resource::kGroups
                        ? limits.max_groups
                        : limits.max_rounds_in_flight;
  absl::StatusOr<IdentityUsage::Lease> lease =
      usage_.Acquire(caller.identity, resource, limit);
  if (lease.ok()) return lease;
  ServerEvent exceeded;
  exceeded.kind = EventKind::kLimitExceeded;
  exceeded.action = std::string(action);
  exceeded.group = std::string(group);
  exceeded.identity = caller.identity;
  exceeded.peer = caller.peer;
  exceeded.details.emplace_back("limit", LimitName(resource));
  exceeded.status = lease.status();
  Report(std::move(exceeded));
  return lease.status();
}

absl::StatusOr<Admission> AccessControl::AdmitStream(
    const grpc::AuthContext* auth, const std::string& peer,
    absl::string_view rpc) {
  FG_ASSIGN_OR_RETURN(Caller caller, Authenticate(auth, peer, rpc));
  FG_ASSIGN_OR_RETURN(IdentityUsage::Lease lease,
                      Acquire(caller, IdentityUsage::Resource::kStreams,
                              absl::StrCat("open_stream:", rpc), ""));
  return Admission{std::move(caller), std::move(lease)};
}

absl::StatusOr<IdentityUsage::Lease> AccessControl::AcquireGroup(
    const Caller& caller, absl::string_view group) {
  return Acquire(caller, IdentityUsage::Resource::kGroups,
                 ActionName(Action::kJoin), group);
}

absl::StatusOr<IdentityUsage::Lease> AccessControl::AcquireRound(
    const Caller& caller, absl::string_view group) {
  return Acquire(caller, IdentityUsage::Resource::kRounds,
                 ActionName(Action::kContribute), group);
}

absl::Status AccessControl::CheckContribution(const Caller& caller, int tensors,
                                              int64_t bytes,
                                              absl::string_view round,
                                              ServerEvent event) {
  const IdentityLimits limits = Current().policy->LimitsFor(caller.identity);
  const char* limit = nullptr;
  std::string what;
  if (tensors > limits.max_tensors_per_contribution) {
    limit = "max_tensors_per_contribution";
    what = absl::StrCat(tensors, " tensors; the limit is ",
                        limits.max_tensors_per_contribution);
  } else if (bytes > limits.max_contribution_bytes) {
    limit = "max_contribution_bytes";
    what = absl::StrCat(bytes, " bytes; the limit is ",
                        limits.max_contribution_bytes);
  } else {
    return absl::OkStatus();
  }
  const absl::Status exceeded = absl::ResourceExhaustedError(
      absl::StrCat(round, ": rank ", event.rank, " (", caller.identity,
                   ") contributes ", what, " (", limit, " in its policy)"));
  event.kind = EventKind::kLimitExceeded;
  event.action = ActionName(Action::kContribute);
  event.identity = caller.identity;
  event.peer = caller.peer;
  event.bytes = bytes;
  event.details.emplace_back("limit", limit);
  event.status = exceeded;
  Report(std::move(event));
  return exceeded;
}

}  // namespace fedgather::server
