// Access control end to end over real mutual TLS on 127.0.0.1:0: a
// certificate the TLS handshake refuses fails at once with a status that
// says why (and no audit record: it never reaches the service), every other
// denial path gets its status and its audit record, limits hit one identity
// only, a policy reload leaves rounds in flight alone, and the audit log of
// a 4-rank all_gather carries the contributions' real digests.
#include <gmock/gmock.h>
#include <grpcpp/create_channel.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "client/provision.h"
#include "common/audit_chain.h"
#include "common/cert_issuer.h"
#include "common/content_hasher.h"
#include "common/file_io.h"
#include "fedgather/v1/fedgather.grpc.pb.h"
#include "tests/e2e/test_cluster.h"

namespace fedgather::testing {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;

std::string Id(const std::string& name) { return ParticipantIdentity(name); }

// FindRecord returns the first audit record for which `match` holds, or
// null json.
json FindRecord(const std::vector<json>& records,
                const std::function<bool(const json&)>& match) {
  for (const json& r : records) {
    if (match(r)) return r;
  }
  return json();
}

// AuditAfterStop stops the cluster's server (closing the audit log), checks
// that the whole chain verifies with the server's certificate and returns
// the records.
std::vector<json> AuditAfterStop(TestCluster& cluster) {
  cluster.StopServer();
  AuditVerifyOptions verify;
  verify.server_cert_pem =
      ReadFileToString(cluster.dir() + "/server/cert.pem").value();
  absl::StatusOr<AuditVerifyReport> report =
      VerifyAuditFiles({cluster.audit_path()}, verify);
  EXPECT_TRUE(report.ok()) << report.status();
  return ReadAuditRecords(cluster.audit_path());
}

// ExpectDenialRecord expects an audit record with `action` and `outcome`
// whose reason holds `reason`; returns it.
json ExpectDenialRecord(const std::vector<json>& records,
                        const std::string& action, const std::string& outcome,
                        const std::string& reason, bool has_peer = true) {
  json found = FindRecord(records, [&](const json& r) {
    return r["action"] == action && r["outcome"] == outcome &&
           r["reason"].is_string() &&
           absl::StrContains(r["reason"].get<std::string>(), reason);
  });
  EXPECT_FALSE(found.is_null())
      << "no audit record action=" << action << " outcome=" << outcome
      << " reason~" << reason;
  if (!found.is_null() && has_peer) {
    // Denials carry who asked from where.
    EXPECT_TRUE(found["peer"].is_string()) << found;
    EXPECT_THAT(found["peer"].get<std::string>(), HasSubstr("127.0.0.1"));
  }
  return found;
}

absl::Status JoinDemo(TestCluster& cluster, const TlsFiles& tls) {
  ClientOptions options;
  options.server_address = cluster.address();
  options.tls = tls;
  auto client = Client::Connect(options);
  if (!client.ok()) return client.status();
  return (*client)
      ->Join({"demo", cluster.participants(), std::nullopt, absl::Seconds(20)})
      .status();
}

// A certificate for `name` signed by the cluster's CA with a chosen window.
TlsFiles CertificateWithWindow(const TestCluster& cluster,
                               const std::string& name, absl::Time not_before,
                               absl::Time not_after) {
  const KeyAndCert ca{ReadFileToString(cluster.dir() + "/ca-key.pem").value(),
                      ReadFileToString(cluster.dir() + "/ca.pem").value()};
  CertificateSpec spec;
  spec.common_name = name;
  spec.uris = {Id(name)};
  spec.client_auth = true;
  spec.not_before = not_before;
  spec.not_after = not_after;
  absl::StatusOr<KeyAndCert> issued = IssueCertificate(ca, spec);
  EXPECT_TRUE(issued.ok()) << issued.status();
  return TlsFiles{issued->cert_pem, issued->key_pem, ca.cert_pem};
}

ClusterOptions Audited(int n) {
  ClusterOptions options(n);
  options.audit = true;
  return options;
}

// ExpectNoAuthenticateRecord checks that the server wrote no `authenticate`
// record: a certificate refused in the TLS handshake never reaches the
// service, so it is not audited (docs/security.md).
void ExpectNoAuthenticateRecord(const std::vector<json>& records) {
  const json found = FindRecord(
      records, [](const json& r) { return r["action"] == "authenticate"; });
  EXPECT_TRUE(found.is_null()) << found;
}

// JoinRefusedAtTheHandshake joins with `tls`, expects UNAUTHENTICATED at
// once (not after JoinOptions::connect_timeout of retries) saying that the
// certificate cannot pass the server's handshake, and returns the message.
std::string JoinRefusedAtTheHandshake(TestCluster& cluster,
                                      const TlsFiles& tls) {
  const absl::Time start = absl::Now();
  const absl::Status status = JoinDemo(cluster, tls);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("this client's certificate cannot pass the TLS "
                        "handshake of the server at " +
                        cluster.address()));
  EXPECT_LT(took, absl::Seconds(10)) << "tried again: " << status;
  return std::string(status.message());
}

TEST(CertificateTest, NoCertificateIsRefusedAtTheHandshake) {
  TestCluster cluster(Audited(2));
  // The client library always presents one.
  TlsFiles anonymous = cluster.TlsFor(TestCluster::Site(0));
  anonymous.cert_pem.clear();
  anonymous.key_pem.clear();
  EXPECT_EQ(Client::Connect({cluster.address(), anonymous}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A raw gRPC client without one never reaches the service.
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = anonymous.ca_pem;
  auto stub = v1::Rendezvous::NewStub(
      grpc::CreateChannel(cluster.address(), grpc::SslCredentials(ssl)));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(20));
  auto stream = stub->Session(&context);
  v1::SessionRequest join;
  join.mutable_join()->set_group("demo");
  join.mutable_join()->set_world_size(2);
  stream->Write(join);
  v1::SessionEvent event;
  EXPECT_FALSE(stream->Read(&event));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(status.error_message(), HasSubstr("Socket closed"));
  Members(cluster).ExpectNextRoundWorks();
  ExpectNoAuthenticateRecord(AuditAfterStop(cluster));
}

TEST(CertificateTest, AnotherCaIsRefusedAtTheHandshakeAtOnce) {
  TestCluster cluster(Audited(2));
  TestCluster other(ClusterOptions(2));  // a second, unrelated CA
  TlsFiles tls = other.TlsFor(TestCluster::Site(0));
  tls.ca_pem = cluster.TlsFor(TestCluster::Site(0)).ca_pem;
  const std::string message = JoinRefusedAtTheHandshake(cluster, tls);
  EXPECT_THAT(message,
              HasSubstr("client certificate '" + Id("site-1") + "' (serial " +
                        CertificateSerialHex(tls.cert_pem).value() +
                        ") is not issued by the CA in this client's "
                        "ca.pem (issuer: CN=fedgather CA, a "
                        "different key"));
  Members(cluster).ExpectNextRoundWorks();
  ExpectNoAuthenticateRecord(AuditAfterStop(cluster));
}

TEST(CertificateTest, ExpiredAndNotYetValidAreRefusedAtTheHandshakeAtOnce) {
  TestCluster cluster(Audited(2));
  const absl::Time now = absl::Now();
  EXPECT_THAT(JoinRefusedAtTheHandshake(
                  cluster, CertificateWithWindow(cluster, "site-1",
                                                 now - absl::Hours(48),
                                                 now - absl::Hours(24))),
              HasSubstr("expired at"));
  EXPECT_THAT(JoinRefusedAtTheHandshake(
                  cluster, CertificateWithWindow(cluster, "site-1",
                                                 now + absl::Hours(24),
                                                 now + absl::Hours(48))),
              HasSubstr("is not valid until"));
  Members(cluster).ExpectNextRoundWorks();
  ExpectNoAuthenticateRecord(AuditAfterStop(cluster));
}

// The server certificate `fedgather provision` writes is also a client
// certificate, so a container probe passes the handshake with it; a
// certificate the handshake refuses fails the health check at once.
TEST(CertificateTest, HealthChecksPassTheHandshakeWithTheServersCertificate) {
  TestCluster cluster(ClusterOptions(2));
  absl::StatusOr<TlsFiles> server_tls = ReadTlsDir(cluster.dir() + "/server");
  ASSERT_TRUE(server_tls.ok()) << server_tls.status();
  auto probe = Client::Connect({cluster.address(), *server_tls});
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_TRUE((*probe)->CheckHealth().ok());
  // A server certificate without clientAuth (as provision wrote before).
  const KeyAndCert ca{ReadFileToString(cluster.dir() + "/ca-key.pem").value(),
                      server_tls->ca_pem};
  CertificateSpec serve_only;
  serve_only.common_name = "localhost";
  serve_only.dns_names = {"localhost"};
  serve_only.server_auth = true;
  absl::StatusOr<KeyAndCert> issued = IssueCertificate(ca, serve_only);
  ASSERT_TRUE(issued.ok()) << issued.status();
  auto old_probe = Client::Connect(
      {cluster.address(), {issued->cert_pem, issued->key_pem, ca.cert_pem}});
  ASSERT_TRUE(old_probe.ok()) << old_probe.status();
  const absl::Status refused = (*old_probe)->CheckHealth();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated) << refused;
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("is not for client authentication (its "
                        "extendedKeyUsage lacks clientAuth)"));
}

// RevokeSiteTwo checks that site-2 works, revokes its certificate and
// reloads the policy, which verifies its live session again and ends it:
// the epoch is over, and site-1's next round learns why.
void RevokeSiteTwo(TestCluster& cluster, Members& members) {
  members.ExpectNextRoundWorks();
  cluster.Revoke({"site-2"});
  ASSERT_TRUE(cluster.server().ReloadPolicy("test").ok());
  const absl::Status ended = GatherRanks(*members.groups[0]);
  EXPECT_EQ(ended.code(), absl::StatusCode::kUnavailable) << ended;
  EXPECT_THAT(std::string(ended.message()),
              HasSubstr("rank 1 (" + Id("site-2") + ") disconnected"));
  EXPECT_THAT(std::string(ended.message()), HasSubstr("was revoked"));
}

TEST(CertificateTest, RevocationEndsTheLiveSessionAndRefusesNewOnes) {
  ClusterOptions options = Audited(2);
  options.crl = true;
  TestCluster cluster(options);
  Members members(cluster);
  RevokeSiteTwo(cluster, members);
  // A new session of site-2 is refused.
  const absl::Status revoked =
      JoinDemo(cluster, cluster.TlsFor(TestCluster::Site(1)));
  EXPECT_EQ(revoked.code(), absl::StatusCode::kUnauthenticated) << revoked;
  EXPECT_THAT(std::string(revoked.message()), HasSubstr("was revoked"));
  EXPECT_THAT(std::string(revoked.message()), HasSubstr(Id("site-2")));
  const std::vector<json> records = AuditAfterStop(cluster);
  const json at_reload = FindRecord(records, [](const json& r) {
    return r["action"] == "authenticate" && r["details"].is_object() &&
           r["details"].value("when", "") == "policy reload";
  });
  ASSERT_FALSE(at_reload.is_null());
  EXPECT_EQ(at_reload["identity"], Id("site-2"));
  EXPECT_EQ(at_reload["outcome"], "UNAUTHENTICATED");
  EXPECT_EQ(ExpectDenialRecord(records, "authenticate", "UNAUTHENTICATED",
                               "was revoked")["identity"],
            Id("site-2"));
  const json reload = FindRecord(
      records, [](const json& r) { return r["action"] == "policy_reload"; });
  ASSERT_FALSE(reload.is_null());
  EXPECT_EQ(reload["outcome"], "OK");
  EXPECT_EQ(reload["identity"], "test");
  EXPECT_EQ(reload["details"]["crl_count"], "1");
  EXPECT_TRUE(reload["details"]["crl_next_update"].is_string());
  EXPECT_FALSE(reload["details"].contains("crl_stale"));
}

// Issue 17 (found by reading): with resumable sessions a revoked member was
// only detached, so the epoch, and its open collective streams, lived on for
// the resume grace. Revocation now ends the epoch at once.
TEST(CertificateTest, RevocationEndsTheEpochAtOnceWhenSessionsMayResume) {
  ClusterOptions options = Audited(2);
  options.crl = true;
  options.limits.resume_grace = absl::Minutes(2);
  TestCluster cluster(options);
  Members members(cluster);
  const absl::Time start = absl::Now();
  RevokeSiteTwo(cluster, members);
  // Well before the two-minute grace would have run out.
  EXPECT_LT(absl::Now() - start, absl::Minutes(1));
}

TEST(CertificateTest, AStaleCrlIsStillHonouredAndReported) {
  ClusterOptions options = Audited(2);
  options.crl = true;
  TestCluster cluster(options);
  // A CRL whose next update has passed, revoking site-2.
  const KeyAndCert ca{ReadFileToString(cluster.dir() + "/ca-key.pem").value(),
                      ReadFileToString(cluster.dir() + "/ca.pem").value()};
  const absl::Time now = absl::Now();
  absl::StatusOr<std::string> stale = IssueCrl(
      ca, {ReadFileToString(cluster.dir() + "/site-2/cert.pem").value()},
      now - absl::Hours(2), now - absl::Hours(1));
  ASSERT_TRUE(stale.ok()) << stale.status();
  ASSERT_TRUE(WriteStringToFile(cluster.dir() + "/crl.pem", *stale).ok());
  ASSERT_TRUE(cluster.server().ReloadPolicy("test").ok());
  const absl::Status revoked =
      JoinDemo(cluster, cluster.TlsFor(TestCluster::Site(1)));
  EXPECT_EQ(revoked.code(), absl::StatusCode::kUnauthenticated) << revoked;
  const json reload = FindRecord(AuditAfterStop(cluster), [](const json& r) {
    return r["action"] == "policy_reload";
  });
  ASSERT_FALSE(reload.is_null());
  EXPECT_EQ(reload["details"]["crl_stale"], "true");
}

TEST(CertificateTest, ACertificateExpiringMidSessionIsCutOff) {
  ClusterOptions options = Audited(2);
  options.certificate_recheck_period = absl::Milliseconds(100);
  TestCluster cluster(options);
  // site-2's certificate expires a few seconds from now (X509 times are
  // whole seconds).
  const absl::Time now = absl::Now();
  ClientOptions short_lived;
  short_lived.server_address = cluster.address();
  short_lived.tls = CertificateWithWindow(
      cluster, "site-2", now - absl::Hours(1), now + absl::Seconds(3));
  auto site1 = cluster.Connect("site-1");
  auto site2 = Client::Connect(short_lived);
  ASSERT_TRUE(site2.ok());
  absl::StatusOr<std::unique_ptr<Group>> g1, g2;
  std::thread join([&] {
    g1 = site1->Join({"demo", 2, 0, absl::Seconds(20)});
  });
  g2 = (*site2)->Join({"demo", 2, 1, absl::Seconds(20)});
  join.join();
  ASSERT_TRUE(g1.ok() && g2.ok());
  // The periodic check cuts site-2 off once its certificate has expired.
  ASSERT_TRUE(cluster.events().WaitFor(
      [](const server::ServerEvent& e) {
        return e.kind == server::EventKind::kAccessDenied &&
               e.identity == Id("site-2") &&
               absl::StrContains(e.status.message(), "expired at");
      },
      absl::Seconds(30)));
  const absl::Status ended = GatherRanks(**g1);
  EXPECT_EQ(ended.code(), absl::StatusCode::kUnavailable) << ended;
  EXPECT_THAT(std::string(ended.message()),
              HasSubstr("rank 1 (" + Id("site-2") + ") disconnected"));
  EXPECT_THAT(std::string(ended.message()), HasSubstr("expired at"));
  const json cut = FindRecord(AuditAfterStop(cluster), [](const json& r) {
    return r["action"] == "authenticate" && r["details"].is_object() &&
           r["details"].value("when", "") == "periodic check";
  });
  ASSERT_FALSE(cut.is_null());
  EXPECT_EQ(cut["identity"], Id("site-2"));
}

TEST(PolicyTest, IdentityNotInPolicyIsDeniedAndAudited) {
  ClusterOptions options = Audited(2);
  options.extra = {"intruder"};
  TestCluster cluster(options);
  const absl::Status denied = JoinDemo(cluster, cluster.TlsFor("intruder"));
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied) << denied;
  EXPECT_THAT(std::string(denied.message()),
              HasSubstr("no such group, or the identity is not a member"));
  // Asking about a group that exists and one that does not: same answer.
  auto intruder = cluster.Connect("intruder");
  const absl::Status status_demo = intruder->GetStatus("demo").status();
  const absl::Status status_nope = intruder->GetStatus("nope").status();
  EXPECT_EQ(status_demo.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(
      std::string(status_demo.message()),
      std::string(server::NotAMemberError(Id("intruder"), "demo").message()));
  EXPECT_EQ(
      std::string(status_nope.message()),
      std::string(server::NotAMemberError(Id("intruder"), "nope").message()));
  // Listing every group shows none to a stranger.
  auto all = intruder->GetStatus("");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->groups_size(), 0);
  const std::vector<json> records = AuditAfterStop(cluster);
  EXPECT_EQ(ExpectDenialRecord(records, "join", "PERMISSION_DENIED",
                               "not a member")["identity"],
            Id("intruder"));
  EXPECT_EQ(ExpectDenialRecord(records, "read_status", "PERMISSION_DENIED",
                               "group 'nope'")["group"],
            "nope");
}

TEST(PolicyTest, EachRoleMayDoOnlyWhatItAllows) {
  ClusterOptions options = Audited(2);
  options.observers = {"dashboard"};
  options.admins = {"ops"};
  TestCluster cluster(options);
  auto dashboard = cluster.Connect("dashboard");
  auto ops = cluster.Connect("ops");

  // An observer and an admin may not join as participants.
  for (const std::string name : {"dashboard", "ops"}) {
    const absl::Status join = JoinDemo(cluster, cluster.TlsFor(name));
    EXPECT_EQ(join.code(), absl::StatusCode::kPermissionDenied) << join;
    EXPECT_THAT(std::string(join.message()), HasSubstr("which may not join"));
  }
  Members members(cluster);
  // The observer reads the status: the formed group with both ranks.
  auto status = dashboard->GetStatus("demo");
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->groups_size(), 1);
  EXPECT_EQ(status->groups(0).role(), "observer");
  EXPECT_TRUE(status->groups(0).formed());
  ASSERT_EQ(status->groups(0).members_size(), 2);
  EXPECT_EQ(status->groups(0).members(1).identity(), Id("site-2"));
  // Neither an observer nor a participant may abort, nor reload.
  for (Client* client : {dashboard.get(), members.clients[0].get()}) {
    const absl::Status abort = client->AbortRound("demo", "no").status();
    EXPECT_EQ(abort.code(), absl::StatusCode::kPermissionDenied) << abort;
    EXPECT_THAT(std::string(abort.message()),
                HasSubstr("which may not abort_round"));
    const absl::Status reload = client->ReloadPolicy().status();
    EXPECT_EQ(reload.code(), absl::StatusCode::kPermissionDenied) << reload;
    EXPECT_THAT(std::string(reload.message()), HasSubstr("not a server admin"));
  }
  // The admin aborts a round in flight: rank 0 has contributed and waits.
  absl::Status rank0;
  std::thread waiter([&] { rank0 = GatherRanks(*members.groups[0]); });
  ASSERT_TRUE(cluster.events().WaitFor(
      [](const server::ServerEvent& e) {
        return e.kind == server::EventKind::kContributionComplete &&
               e.rank == 0;
      },
      absl::Seconds(30)));
  auto aborted = ops->AbortRound("demo", "maintenance window");
  ASSERT_TRUE(aborted.ok()) << aborted.status();
  ASSERT_EQ(aborted->aborted_seqs_size(), 1);
  EXPECT_EQ(aborted->aborted_seqs(0), 0u);
  waiter.join();
  // Rank 1 then calls seq 0 too and gets the same answer.
  const absl::Status rank1 = GatherRanks(*members.groups[1]);
  ExpectSameStatusEverywhere({rank0, rank1}, absl::StatusCode::kAborted);
  EXPECT_THAT(
      std::string(rank0.message()),
      HasSubstr("aborted by admin '" + Id("ops") + "': maintenance window"));
  members.ExpectNextRoundWorks();

  const std::vector<json> records = AuditAfterStop(cluster);
  ExpectDenialRecord(records, "join", "PERMISSION_DENIED", "has role observer");
  ExpectDenialRecord(records, "abort_round", "PERMISSION_DENIED",
                     "has role participant");
  ExpectDenialRecord(records, "reload_policy", "PERMISSION_DENIED",
                     "not a server admin");
  const json request = FindRecord(
      records, [](const json& r) { return r["action"] == "abort_request"; });
  ASSERT_FALSE(request.is_null());
  EXPECT_EQ(request["identity"], Id("ops"));
  EXPECT_EQ(request["details"]["reason"], "maintenance window");
  ExpectDenialRecord(records, "abort", "ABORTED", "maintenance window",
                     /*has_peer=*/false);
  EXPECT_FALSE(FindRecord(records, [](const json& r) {
                 return r["action"] == "status" &&
                        r["identity"] == Id("dashboard");
               }).is_null());
}

TEST(PolicyTest, ActingAsAnotherIdentitysRankIsDeniedAndAudited) {
  TestCluster cluster(Audited(2));
  Members members(cluster);
  // site-2's client sends a header claiming rank 0, which site-1 holds.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stub = v1::Rendezvous::NewStub(grpc::CreateCustomChannel(
      cluster.address(),
      MakeChannelCredentials(cluster.TlsFor(TestCluster::Site(1))), args));
  grpc::ClientContext context;
  auto stream = stub->Collective(&context);
  v1::CollectiveFrame frame;
  v1::CollectiveHeader* header = frame.mutable_header();
  header->set_group("demo");
  header->set_epoch(members.groups[1]->epoch());
  header->set_op(v1::ALL_GATHER);
  header->set_rank(0);
  v1::TensorSpec* spec = header->add_tensors();
  spec->set_name("r");
  spec->set_dtype(v1::I32);
  spec->add_shape(1);
  stream->Write(frame);
  stream->WritesDone();
  while (stream->Read(&frame)) {
  }
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(),
              HasSubstr("may not act as rank 0, which is bound to another"));
  members.ExpectNextRoundWorks();
  EXPECT_EQ(ExpectDenialRecord(AuditAfterStop(cluster), "contribute",
                               "PERMISSION_DENIED",
                               "may not act as rank 0")["identity"],
            Id("site-2"));
}

// Gathers `tensors` float tensors of `elements` each from every rank.
absl::Status GatherFloats(Group& group, int tensors, int64_t elements) {
  std::vector<std::vector<float>> in(tensors,
                                     std::vector<float>(elements, 1.5f));
  std::vector<std::vector<float>> out(
      tensors, std::vector<float>(elements * group.world_size()));
  std::vector<ConstHostTensor> ins;
  std::vector<MutableHostTensor> outs;
  for (int t = 0; t < tensors; ++t) {
    const std::string name = "t" + std::to_string(t);
    ins.push_back({{name, DType::kF32, {elements}}, in[t].data()});
    outs.push_back(
        {{name, DType::kF32, {group.world_size(), elements}}, out[t].data()});
  }
  return group.AllGatherInto(ins, outs);
}

TEST(LimitTest, ContributionLimitsFailTheRoundOnEveryRankAndAreAudited) {
  ClusterOptions options = Audited(2);
  options.policy_extra =
      "identity_limits:\n"
      "  spiffe://fedgather/site-2:\n"
      "    max_tensors_per_contribution: 2\n"
      "    max_contribution_bytes: 1KiB\n";
  TestCluster cluster(options);
  Members members(cluster);
  // Three tensors: past site-2's tensor limit, not site-1's.
  std::vector<absl::Status> tensors = members.Run(
      [&](int i) { return GatherFloats(*members.groups[i], 3, 4); });
  ExpectSameStatusEverywhere(tensors, absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(tensors[0].message()),
              HasSubstr("rank 1 (" + Id("site-2") +
                        ") contributes 3 tensors; the limit is 2 "
                        "(max_tensors_per_contribution"));
  // 2 KiB: past site-2's byte limit.
  std::vector<absl::Status> bytes = members.Run(
      [&](int i) { return GatherFloats(*members.groups[i], 1, 512); });
  ExpectSameStatusEverywhere(bytes, absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(
      std::string(bytes[0].message()),
      HasSubstr("2048 bytes; the limit is 1024 (max_contribution_bytes"));
  // Within the limits the next round works.
  for (const absl::Status& s : members.Run(
           [&](int i) { return GatherFloats(*members.groups[i], 2, 64); })) {
    EXPECT_TRUE(s.ok()) << s;
  }
  const std::vector<json> records = AuditAfterStop(cluster);
  const json tensor_hit =
      ExpectDenialRecord(records, "contribute", "RESOURCE_EXHAUSTED",
                         "max_tensors_per_contribution");
  EXPECT_EQ(tensor_hit["details"]["limit"], "max_tensors_per_contribution");
  EXPECT_EQ(tensor_hit["identity"], Id("site-2"));
  EXPECT_EQ(tensor_hit["rank"], 1);
  EXPECT_EQ(tensor_hit["collective_seq"], 0);
  const json byte_hit = ExpectDenialRecord(
      records, "contribute", "RESOURCE_EXHAUSTED", "max_contribution_bytes");
  EXPECT_EQ(byte_hit["details"]["limit"], "max_contribution_bytes");
  EXPECT_EQ(byte_hit["collective_seq"], 1);
  EXPECT_EQ(byte_hit["bytes"], 2048);
}

// WithSecondGroup reloads `cluster`'s policy with a second group, "g2", of
// world size `world` whose participants are site-1 and site-2.
void WithSecondGroup(TestCluster& cluster, int world) {
  const std::string policy =
      cluster.DefaultPolicy() +
      "  - name: g2\n    world_size: " + std::to_string(world) +
      "\n    members:\n"
      "      spiffe://fedgather/site-1: participant\n"
      "      spiffe://fedgather/site-2: participant\n";
  ASSERT_TRUE(WriteStringToFile(cluster.policy_path(), policy).ok());
  ASSERT_TRUE(cluster.server().ReloadPolicy("test").ok());
}

// WaitForJoin waits until `identity` waits in `group`.
bool WaitForJoin(TestCluster& cluster, const std::string& identity,
                 const std::string& group) {
  return cluster.events().WaitFor(
      [&](const server::ServerEvent& e) {
        return e.kind == server::EventKind::kMemberJoined &&
               e.identity == identity && e.group == group;
      },
      absl::Seconds(30));
}

// SiteOneLimited is an audited 2-site cluster where site-1 has `limit` (a
// policy limit mapping) and group g2 of `g2_world` exists.
std::unique_ptr<TestCluster> SiteOneLimited(const std::string& limit,
                                            int g2_world) {
  ClusterOptions options = Audited(2);
  options.policy_extra =
      "identity_limits:\n  spiffe://fedgather/site-1: " + limit + "\n";
  auto cluster = std::make_unique<TestCluster>(options);
  WithSecondGroup(*cluster, g2_world);
  return cluster;
}

TEST(LimitTest, StreamLimitHitsOnlyItsIdentity) {
  std::unique_ptr<TestCluster> owned =
      SiteOneLimited("{max_concurrent_streams: 2}", 2);
  TestCluster& cluster = *owned;
  // site-1 holds two session streams: it waits in demo and in g2.
  auto site1a = cluster.Connect("site-1");
  auto site1b = cluster.Connect("site-1");
  absl::StatusOr<std::unique_ptr<Group>> demo1, g2_1;
  std::thread a([&] {
    demo1 = site1a->Join({"demo", 2, 0, absl::Seconds(30)});
  });
  std::thread b([&] { g2_1 = site1b->Join({"g2", 2, 0, absl::Seconds(30)}); });
  ASSERT_TRUE(WaitForJoin(cluster, Id("site-1"), "demo"));
  ASSERT_TRUE(WaitForJoin(cluster, Id("site-1"), "g2"));
  // A third stream is one too many for site-1...
  auto site1c = cluster.Connect("site-1");
  const absl::Status refused =
      site1c->Join({"demo", 2, std::nullopt, absl::Seconds(20)}).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("already holds 2 open streams, the limit its policy "
                        "sets (max_concurrent_streams: 2)"));
  // ...while site-2 opens as many as it needs: both groups form.
  auto site2 = cluster.Connect("site-2");
  absl::StatusOr<std::unique_ptr<Group>> demo2, g2_2;
  std::thread c([&] {
    demo2 = site2->Join({"demo", 2, 1, absl::Seconds(30)});
  });
  g2_2 = site2->Join({"g2", 2, 1, absl::Seconds(30)});
  a.join();
  b.join();
  c.join();
  EXPECT_TRUE(demo1.ok() && demo2.ok() && g2_1.ok() && g2_2.ok());
  const json hit =
      ExpectDenialRecord(AuditAfterStop(cluster), "open_stream:Session",
                         "RESOURCE_EXHAUSTED", "open streams");
  EXPECT_EQ(hit["identity"], Id("site-1"));
  EXPECT_EQ(hit["details"]["limit"], "max_concurrent_streams");
}

TEST(LimitTest, GroupLimitHitsOnlyItsIdentity) {
  std::unique_ptr<TestCluster> owned = SiteOneLimited("{max_groups: 1}", 1);
  TestCluster& cluster = *owned;
  auto site1 = cluster.Connect("site-1");
  auto site2 = cluster.Connect("site-2");
  // site-2 joins g2 (world size 1, so it forms at once).
  auto site2_second = site2->Join({"g2", 1, std::nullopt, absl::Seconds(20)});
  ASSERT_TRUE(site2_second.ok()) << site2_second.status();
  // site-1 waits in "demo"; its second group is one too many...
  absl::StatusOr<std::unique_ptr<Group>> site1_demo;
  std::thread waiter([&] {
    site1_demo = site1->Join({"demo", 2, 0, absl::Seconds(30)});
  });
  ASSERT_TRUE(WaitForJoin(cluster, Id("site-1"), "demo"));
  auto extra_client = cluster.Connect("site-1");
  const absl::Status too_many =
      extra_client->Join({"g2", 1, std::nullopt, absl::Seconds(20)}).status();
  EXPECT_EQ(too_many.code(), absl::StatusCode::kResourceExhausted) << too_many;
  EXPECT_THAT(std::string(too_many.message()),
              HasSubstr("already holds 1 group memberships"));
  // ...while site-2, in two groups now, is not limited.
  auto site2_demo = site2->Join({"demo", 2, 1, absl::Seconds(30)});
  waiter.join();
  ASSERT_TRUE(site1_demo.ok()) << site1_demo.status();
  ASSERT_TRUE(site2_demo.ok()) << site2_demo.status();
  absl::Status other;
  std::thread peer([&] { other = GatherRanks(**site1_demo); });
  EXPECT_TRUE(GatherRanks(**site2_demo).ok());
  peer.join();
  EXPECT_TRUE(other.ok()) << other;
  const json hit = ExpectDenialRecord(AuditAfterStop(cluster), "join",
                                      "RESOURCE_EXHAUSTED", "max_groups");
  EXPECT_EQ(hit["group"], "g2");
  EXPECT_EQ(hit["details"]["limit"], "max_groups");
}

TEST(ReloadTest, RoundInFlightCompletesAndNewJoinsFollowTheNewPolicy) {
  ClusterOptions options = Audited(2);
  options.extra = {"site-3"};
  options.admins = {"ops"};
  options.limits.max_buffered_bytes_per_round = 1 << 20;
  TestCluster cluster(options);
  // site-3 is in no group yet.
  auto site3 = cluster.Connect("site-3");
  EXPECT_EQ(
      site3->Join({"solo", 1, std::nullopt, absl::Seconds(10)}).status().code(),
      absl::StatusCode::kPermissionDenied);

  Members members(cluster);
  // Rank 0 uploads 8 MiB through a 1 MiB round buffer: it stalls until
  // rank 1 joins the round, so the round is in flight across the reload.
  constexpr int64_t kElements = 2 << 20;
  std::vector<std::vector<float>> in(2, std::vector<float>(kElements));
  for (int r = 0; r < 2; ++r) {
    for (int64_t i = 0; i < kElements; ++i) in[r][i] = r * 1e6f + i;
  }
  std::vector<std::vector<float>> out(2, std::vector<float>(2 * kElements));
  auto gather = [&](int r) {
    ConstHostTensor tin{{"w", DType::kF32, {kElements}}, in[r].data()};
    MutableHostTensor tout{{"w", DType::kF32, {2, kElements}}, out[r].data()};
    return members.groups[r]->AllGatherInto({&tin, 1}, {&tout, 1});
  };
  absl::Status rank0;
  std::thread uploader([&] { rank0 = gather(0); });
  ASSERT_TRUE(cluster.events().WaitFor(
      [](const server::ServerEvent& e) {
        return e.kind == server::EventKind::kContributionStarted && e.rank == 0;
      },
      absl::Seconds(30)));

  // A reload by the admin RPC: adds group "solo" for site-3, keeps "demo".
  const std::string with_solo =
      cluster.DefaultPolicy() +
      "  - name: solo\n"
      "    world_size: 1\n"
      "    members:\n"
      "      spiffe://fedgather/site-3: participant\n";
  ASSERT_TRUE(WriteStringToFile(cluster.policy_path(), with_solo).ok());
  auto ops = cluster.Connect("ops");
  auto reloaded = ops->ReloadPolicy();
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ(reloaded->groups(), 2u);

  // A policy that does not parse is refused; the last one stays in force.
  ASSERT_TRUE(
      WriteStringToFile(cluster.policy_path(), "version: 1\nbad: [\n").ok());
  const absl::Status broken = ops->ReloadPolicy().status();
  EXPECT_EQ(broken.code(), absl::StatusCode::kInvalidArgument) << broken;
  EXPECT_THAT(std::string(broken.message()),
              HasSubstr("the old one stays in force"));

  // The round in flight completes, byte for byte.
  const absl::Status rank1 = gather(1);
  uploader.join();
  ASSERT_TRUE(rank0.ok()) << rank0;
  ASSERT_TRUE(rank1.ok()) << rank1;
  for (int r = 0; r < 2; ++r) {
    for (int src = 0; src < 2; ++src) {
      EXPECT_EQ(0, std::memcmp(out[r].data() + src * kElements, in[src].data(),
                               kElements * sizeof(float)));
    }
  }
  // The new join follows the new policy.
  auto solo = site3->Join({"solo", 1, std::nullopt, absl::Seconds(20)});
  ASSERT_TRUE(solo.ok()) << solo.status();
  EXPECT_TRUE(GatherRanks(**solo).ok());

  // Removing site-2 closes demo's epoch: site-1's next round is ABORTED
  // naming the reload, and site-2 may no longer join.
  std::string without_site2 = with_solo;
  without_site2.replace(without_site2.find("world_size: 2"), 13,
                        "world_size: 1");
  const std::string site2_line =
      "      spiffe://fedgather/site-2: participant\n";
  without_site2.replace(without_site2.find(site2_line), site2_line.size(), "");
  ASSERT_TRUE(WriteStringToFile(cluster.policy_path(), without_site2).ok());
  ASSERT_TRUE(cluster.server().ReloadPolicy("SIGHUP").ok());
  const absl::Status closed = GatherRanks(*members.groups[0]);
  EXPECT_EQ(closed.code(), absl::StatusCode::kAborted) << closed;
  EXPECT_THAT(
      std::string(closed.message()),
      HasSubstr("closed by a policy reload that removed " + Id("site-2")));
  EXPECT_EQ(JoinDemo(cluster, cluster.TlsFor("site-2")).code(),
            absl::StatusCode::kPermissionDenied);

  const std::vector<json> records = AuditAfterStop(cluster);
  int reloads_ok = 0;
  for (const json& r : records) {
    if (r["action"] == "policy_reload" && r["outcome"] == "OK") ++reloads_ok;
  }
  EXPECT_EQ(reloads_ok, 2);
  ExpectDenialRecord(records, "policy_reload", "INVALID_ARGUMENT",
                     "the old one stays in force");
}

TEST(AuditTest, FourRankAllGatherRecordsTheContributionsDigests) {
  TestCluster cluster(Audited(4));
  auto owned = std::make_unique<Members>(cluster);
  Members& members = *owned;
  constexpr size_t kBytes = 3 << 20;  // several chunks per contribution
  std::vector<std::vector<uint8_t>> in(4);
  std::vector<std::string> digests(4);
  for (int r = 0; r < 4; ++r) {
    in[r] = RandomBytes(kBytes, 100 + r);
    digests[r] = DigestToHex(
        HashContent(DigestAlgorithm::kBlake3, in[r].data(), in[r].size()));
  }
  std::vector<std::vector<uint8_t>> out(4, std::vector<uint8_t>(4 * kBytes));
  for (
      const absl::Status& s : members.Run([&](int r) {
        ConstHostTensor tin{{"w", DType::kU8, {int64_t{kBytes}}}, in[r].data()};
        MutableHostTensor tout{{"w", DType::kU8, {4, int64_t{kBytes}}},
                               out[r].data()};
        return members.groups[r]->AllGatherInto({&tin, 1}, {&tout, 1});
      })) {
    ASSERT_TRUE(s.ok()) << s;
  }
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(0, std::memcmp(out[0].data() + r * kBytes, in[r].data(), kBytes));
  }
  owned.reset();  // leave, so the leaves are audited too
  ASSERT_TRUE(cluster.events().WaitFor(
      [](const server::ServerEvent& e) {
        return e.kind == server::EventKind::kGroupDissolved;
      },
      absl::Seconds(30)));
  const std::vector<json> records = AuditAfterStop(cluster);

  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.front()["action"], "server_start");
  // The last record is the signed anchor Close writes after server_stop.
  EXPECT_EQ(records.back()["action"], "anchor");
  EXPECT_EQ(records[records.size() - 2]["action"], "server_stop");
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(records[i]["seq"], i);
    for (const char* key :
         {"seq", "time", "identity", "peer", "action", "group", "epoch",
          "collective_seq", "rank", "op", "bytes", "digest_algorithm", "digest",
          "digests", "outcome", "reason", "details", "prev"}) {
      EXPECT_TRUE(records[i].contains(key)) << key << " in " << records[i];
    }
  }
  for (int r = 0; r < 4; ++r) {
    const json join = FindRecord(records, [&](const json& j) {
      return j["action"] == "join" && j["identity"] == Id(TestCluster::Site(r));
    });
    ASSERT_FALSE(join.is_null()) << r;
    EXPECT_EQ(join["outcome"], "OK");
    const json contribution = FindRecord(records, [&](const json& j) {
      return j["action"] == "contribution" && j["rank"] == r && j["epoch"] == 1;
    });
    ASSERT_FALSE(contribution.is_null()) << r;
    EXPECT_EQ(contribution["identity"], Id(TestCluster::Site(r)));
    EXPECT_EQ(contribution["digest_algorithm"], "blake3");
    EXPECT_EQ(contribution["digest"], digests[r]);
    EXPECT_EQ(contribution["bytes"], kBytes);
    EXPECT_EQ(contribution["op"], "ALL_GATHER");
    EXPECT_EQ(contribution["group"], "demo");
    EXPECT_EQ(contribution["collective_seq"], 0);
    EXPECT_THAT(contribution["peer"].get<std::string>(),
                HasSubstr("127.0.0.1"));
  }
  const json commit = FindRecord(records, [](const json& j) {
    return j["action"] == "commit" && j["epoch"] == 1;
  });
  ASSERT_FALSE(commit.is_null());
  EXPECT_EQ(commit["outcome"], "OK");
  EXPECT_EQ(commit["digest_algorithm"], "blake3");
  ASSERT_EQ(commit["digests"].size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(commit["digests"][r]["rank"], r);
    EXPECT_EQ(commit["digests"][r]["identity"], Id(TestCluster::Site(r)));
    EXPECT_EQ(commit["digests"][r]["digest"], digests[r]);
    EXPECT_EQ(commit["digests"][r]["bytes"], kBytes);
  }
  const json formed = FindRecord(
      records, [](const json& j) { return j["action"] == "group_formed"; });
  ASSERT_FALSE(formed.is_null());
  EXPECT_EQ(formed["details"]["rank_3"], Id("site-4"));
  EXPECT_FALSE(FindRecord(records, [](const json& j) {
                 return j["action"] == "leave" && j["epoch"] == 1;
               }).is_null());
}

}  // namespace
}  // namespace fedgather::testing
