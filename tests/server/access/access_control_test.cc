// AccessControl (server/access/access_control.h) on its own: policy checks,
// reloads that keep the old policy on error, per-identity leases, the
// contribution limits, and watched sessions cut off by a CRL or by expiry
// at the injected clock's time. Every refusal must reach the event sink.
#include "server/access/access_control.h"

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/cert_issuer.h"
#include "common/clock.h"
#include "common/file_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/events/event_sink.h"
#include "server/membership/group_registry.h"
#include "tests/server/events/recording_events.h"

namespace fedgather::server {
namespace {

using ::testing::HasSubstr;

constexpr char kSite1[] = "spiffe://fedgather/site-1";
constexpr char kSite2[] = "spiffe://fedgather/site-2";

constexpr char kPolicy[] = R"(
version: 1
identity_limits:
  spiffe://fedgather/site-1:
    max_rounds_in_flight: 2
    max_contribution_bytes: 1024
    max_tensors_per_contribution: 2
groups:
  - name: demo
    world_size: 1
    members:
      spiffe://fedgather/site-1: participant
      spiffe://fedgather/site-2: observer
)";

class Session : public RevocableSession {
 public:
  void Revoke(const absl::Status& status) override { revoked = status; }
  absl::Status revoked;
};

class AccessControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "access-control-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    absl::StatusOr<KeyAndCert> ca =
        CreateCertificateAuthority("test CA", absl::Hours(48));
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = *ca;
    ASSERT_TRUE(WriteStringToFile(policy_path(), kPolicy).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string policy_path() const { return dir_ + "/policy.yaml"; }
  std::string crl_path() const { return dir_ + "/crl.pem"; }

  // Make creates the AccessControl, with a CRL file when `with_crl`.
  void Make(bool with_crl = false) {
    if (with_crl) {
      absl::StatusOr<std::string> crl =
          IssueCrl(ca_, {}, now_ - absl::Minutes(1), now_ + absl::Hours(1));
      ASSERT_TRUE(crl.ok()) << crl.status();
      ASSERT_TRUE(WriteStringToFile(crl_path(), *crl).ok());
    }
    AccessControlOptions options;
    options.policy_path = policy_path();
    options.client_ca_pem = ca_.cert_pem;
    options.crl_path = with_crl ? crl_path() : "";
    options.registry = &registry_;
    options.events = &sink_;
    options.clock = &clock_;
    absl::StatusOr<std::unique_ptr<AccessControl>> made =
        AccessControl::Create(options);
    ASSERT_TRUE(made.ok()) << made.status();
    access_ = *std::move(made);
  }

  Caller CallerWithCertificate(const std::string& identity,
                               absl::Time not_after) {
    CertificateSpec spec;
    spec.uris = {identity};
    spec.client_auth = true;
    spec.not_before = now_ - absl::Hours(1);
    spec.not_after = not_after;
    absl::StatusOr<KeyAndCert> cert = IssueCertificate(ca_, spec);
    EXPECT_TRUE(cert.ok()) << cert.status();
    return Caller{identity, "ipv4:127.0.0.1:1",
                  cert.value_or(KeyAndCert{}).cert_pem, ""};
  }

  std::string dir_;
  KeyAndCert ca_;
  // Whole seconds: certificates and CRLs keep times to the second.
  // The test's start; only clock_ moves.
  const absl::Time now_ =
      absl::FromUnixSeconds(absl::ToUnixSeconds(absl::Now()));
  FakeClock clock_{now_};
  GroupRegistry registry_{GroupLimits{}};
  testing::RecordingEvents sink_;
  std::unique_ptr<AccessControl> access_;
};

TEST_F(AccessControlTest, AuthorizesByRoleAndReportsEachRefusal) {
  Make();
  const Caller site1{kSite1, "ipv4:127.0.0.1:1", "", ""};
  const Caller site2{kSite2, "ipv4:127.0.0.1:2", "", ""};
  EXPECT_TRUE(access_->Authorize(site1, "demo", Action::kContribute).ok());
  EXPECT_TRUE(access_->Authorize(site2, "demo", Action::kReadStatus).ok());
  const absl::Status observer =
      access_->Authorize(site2, "demo", Action::kContribute);
  EXPECT_EQ(observer.code(), absl::StatusCode::kPermissionDenied);
  const absl::Status unknown =
      access_->Authorize(site1, "nowhere", Action::kJoin);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(unknown.message()), HasSubstr("nowhere"));
  const std::vector<ServerEvent> events = sink_.events();
  ASSERT_EQ(events.size(), 2u);
  for (const ServerEvent& event : events) {
    EXPECT_EQ(event.kind, EventKind::kAccessDenied);
    EXPECT_EQ(event.status.code(), absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(events[0].identity, kSite2);
  EXPECT_EQ(events[1].identity, kSite1);
}

TEST_F(AccessControlTest, AFailedReloadKeepsTheOldPolicyAndSaysSo) {
  Make();
  const Caller ops{"spiffe://fedgather/ops", "ipv4:127.0.0.1:3", "", ""};
  const Caller site2{kSite2, "ipv4:127.0.0.1:2", "", ""};
  ASSERT_TRUE(WriteStringToFile(policy_path(), "version: 1\ngroups: [\n").ok());
  const absl::Status broken = access_->Reload(ops);
  EXPECT_EQ(broken.code(), absl::StatusCode::kInvalidArgument) << broken;
  EXPECT_THAT(std::string(broken.message()), HasSubstr("the old one stays"));
  EXPECT_THAT(std::string(broken.message()), HasSubstr(policy_path()));
  EXPECT_FALSE(access_->Authorize(site2, "demo", Action::kContribute).ok());

  // A good policy takes effect at once: site-2 becomes a participant.
  std::string promoted = kPolicy;
  promoted.replace(promoted.find("site-2: observer"), 16,
                   "site-2: participant");
  ASSERT_TRUE(WriteStringToFile(policy_path(), promoted).ok());
  EXPECT_TRUE(access_->Reload(ops).ok());
  EXPECT_TRUE(access_->Authorize(site2, "demo", Action::kContribute).ok());

  const std::vector<ServerEvent> reloads =
      sink_.OfKind(EventKind::kPolicyReloaded);
  ASSERT_EQ(reloads.size(), 2u);
  EXPECT_EQ(reloads[0].identity, ops.identity);
  EXPECT_EQ(reloads[0].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(reloads[1].status.ok()) << reloads[1].status;
}

TEST_F(AccessControlTest, RoundsInFlightAreLeasedUpToTheIdentitysLimit) {
  Make();
  const Caller site1{kSite1, "ipv4:127.0.0.1:1", "", ""};
  absl::StatusOr<IdentityUsage::Lease> first =
      access_->AcquireRound(site1, "demo");
  absl::StatusOr<IdentityUsage::Lease> second =
      access_->AcquireRound(site1, "demo");
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  absl::StatusOr<IdentityUsage::Lease> third =
      access_->AcquireRound(site1, "demo");
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(third.status().message()),
              HasSubstr("max_rounds_in_flight"));
  ASSERT_FALSE(sink_.events().empty());
  EXPECT_EQ(sink_.events().back().kind, EventKind::kLimitExceeded);
  // Giving one back makes room for one more.
  *first = IdentityUsage::Lease();
  EXPECT_TRUE(access_->AcquireRound(site1, "demo").ok());
}

TEST_F(AccessControlTest, ContributionsPastTheLimitsAreRefusedNamingThem) {
  Make();
  const Caller site1{kSite1, "ipv4:127.0.0.1:1", "", ""};
  const std::string round = "group 'demo' epoch 1 seq 3";
  EXPECT_TRUE(access_->CheckContribution(site1, 2, 1024, round, {}).ok());
  const absl::Status bytes =
      access_->CheckContribution(site1, 1, 1025, round, {});
  EXPECT_EQ(bytes.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(bytes.message()), HasSubstr("1025"));
  EXPECT_THAT(std::string(bytes.message()), HasSubstr(round));
  const absl::Status tensors =
      access_->CheckContribution(site1, 3, 10, round, {});
  EXPECT_EQ(tensors.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(tensors.message()), HasSubstr(round));
  ASSERT_EQ(sink_.events().size(), 2u);
  EXPECT_EQ(sink_.events()[0].kind, EventKind::kLimitExceeded);
  EXPECT_EQ(sink_.events()[1].kind, EventKind::kLimitExceeded);
}

TEST_F(AccessControlTest, AReloadedCrlRevokesTheSessionsItLists) {
  Make(/*with_crl=*/true);
  const Caller revoked = CallerWithCertificate(kSite1, now_ + absl::Hours(2));
  const Caller kept = CallerWithCertificate(kSite2, now_ + absl::Hours(2));
  auto revoked_session = std::make_shared<Session>();
  auto kept_session = std::make_shared<Session>();
  access_->WatchSession(revoked, revoked_session);
  access_->WatchSession(kept, kept_session);

  absl::StatusOr<std::string> crl = IssueCrl(
      ca_, {revoked.cert_pem}, now_ - absl::Minutes(1), now_ + absl::Hours(1));
  ASSERT_TRUE(crl.ok()) << crl.status();
  ASSERT_TRUE(WriteStringToFile(crl_path(), *crl).ok());
  ASSERT_TRUE(access_->Reload(Caller{"SIGHUP", "", "", ""}).ok());
  EXPECT_EQ(revoked_session->revoked.code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(revoked_session->revoked.message()),
              HasSubstr("revoked"));
  EXPECT_TRUE(kept_session->revoked.ok()) << kept_session->revoked;
  ASSERT_FALSE(sink_.events().empty());
  EXPECT_EQ(sink_.events().back().kind, EventKind::kAccessDenied);
  EXPECT_EQ(sink_.events().back().identity, kSite1);
}

TEST_F(AccessControlTest, ASessionIsCutOffOnceTheClockPassesItsExpiry) {
  Make();
  const Caller expiring = CallerWithCertificate(kSite1, now_ + absl::Hours(1));
  auto session = std::make_shared<Session>();
  access_->WatchSession(expiring, session);
  access_->RecheckSessions("timer");
  EXPECT_TRUE(session->revoked.ok()) << session->revoked;
  // Only the injected clock moves; the certificate has not changed.
  clock_.Advance(absl::Hours(1) + absl::Seconds(1));
  access_->RecheckSessions("timer");
  EXPECT_EQ(session->revoked.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(session->revoked.message()), HasSubstr("expired"));
}

}  // namespace
}  // namespace fedgather::server
