// Fault injection with real processes (issue 9): a fedgather-server process
// and `fedgather join` processes over mutual TLS (tests/faults/
// fault_cluster.h). Each case injects one fault and checks that
//   - nothing hangs past the case's stated bound,
//   - the error every survivor gets names the culprit,
//   - the server serves the next round, byte for byte,
//   - data is intact (outputs byte for byte) and the audit chain verifies.
// Each prints "FAULT <case>: bound B, observed O" for the fault matrix.
// The network cut between namespaces is in netns_fault_test.cc.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <grpcpp/create_channel.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "common/file_io.h"
#include "common/tls_credentials.h"
#include "fedgather/v1/fedgather.grpc.pb.h"
#include "tests/common/process_stats.h"
#include "tests/e2e/metrics_scrape.h"
#include "tests/faults/fault_cluster.h"
#include "tests/faults/tls_probe.h"

namespace fedgather::testing {
namespace {

using ::testing::HasSubstr;

constexpr size_t kMiB = 1 << 20;
const char kSite2[] = "rank 1 (spiffe://fedgather/site-2)";

// A running process's resident memory, in KiB.
int64_t RssKiB(pid_t pid) {
  absl::StatusOr<ProcessStats> stats = ReadProcessStats(pid);
  EXPECT_TRUE(stats.ok()) << stats.status();
  return stats.ok() ? stats->rss_kib : -1;
}

// A TCP connection to the server's port that this test drives by hand.
int ConnectTcp(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(
      ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  return fd;
}
// ClosedWithin reads from `fd` until the server closes it (EOF or reset);
// false when it is still open after `bound`.
bool ClosedWithin(int fd, absl::Duration bound) {
  const absl::Time deadline = absl::Now() + bound;
  char buffer[4096];
  while (absl::Now() < deadline) {
    timeval wait{0, 100 * 1000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
      return true;
    }
  }
  return false;
}

// MetricsPort is the port of the server's /metrics, from its log line
// "metrics on port N"; 0 when it does not appear within 30 s.
int MetricsPort(FaultCluster& c) {
  const std::string line = "metrics on port ";
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  do {
    const std::string log = c.server().Log();
    if (const size_t at = log.find(line); at != std::string::npos) {
      return std::atoi(log.c_str() + at + line.size());
    }
    absl::SleepFor(absl::Milliseconds(20));
  } while (absl::Now() < deadline);
  return 0;
}

// MetricAfter polls the server's /metrics until `series` equals `value`;
// returns the last value read.
double MetricAfter(int port, const std::string& series, double value,
                   absl::Duration bound) {
  const absl::Time deadline = absl::Now() + bound;
  double last = -1;
  do {
    last = MetricValue(Scrape(port), series);
    if (last == value) return last;
    absl::SleepFor(absl::Milliseconds(50));
  } while (absl::Now() < deadline);
  return last;
}

TEST(FaultTest, ParticipantKilledMidUploadFailsTheOthersNamingIt) {
  FaultCluster c(3);
  Participant& a = c.Join(0, 4096, 1);
  Participant& victim = c.Join(1, 96 * kMiB, 2);
  Participant& b = c.Join(2, 4096, 3);
  ASSERT_TRUE(
      c.WaitForEvent("contribution_started", {{"rank", 1}}, absl::Seconds(60)))
      << c.server().Log();
  ASSERT_EQ(::kill(victim.pid, SIGKILL), 0);
  const absl::Time killed = absl::Now();
  EXPECT_EQ(c.Exit(victim, absl::Seconds(10)), 128 + SIGKILL);
  // The server waits kResumeGrace for the victim to resume its stream.
  const absl::Duration bound = kResumeGrace + absl::Seconds(10);
  for (Participant* p : {&a, &b}) {
    EXPECT_EQ(c.Exit(*p, bound), 1) << c.Log(*p);
    EXPECT_THAT(c.Log(*p), HasSubstr("UNAVAILABLE"));
    EXPECT_THAT(c.Log(*p), HasSubstr(kSite2));
  }
  ReportFault("kill -9 participant mid-upload", bound, SecondsSince(killed));
  EXPECT_EQ(c.CountEvents("contribution_complete", {{"rank", 1}}), 0)
      << "the victim's upload ended before the kill: not mid-upload";
  c.ExpectNextRoundWorks(100);
  c.StopAndVerifyAudit();
}

TEST(FaultTest, ParticipantKilledMidDownloadLosesNothingForTheOthers) {
  // The stopped victim sends no heartbeats, and the server would lose it,
  // failing the round, if the others were still uploading at the heartbeat
  // timeout. This case is about a rank lost once every contribution is in,
  // so the timeout here is far above the others' upload time (about 3 s
  // under ASan on a loaded machine; 3 s was too short for it in CI).
  FaultCluster c(3, {"--heartbeat-timeout", "30"});
  Participant& a = c.Join(0, 16 * kMiB, 11);
  Participant& victim = c.Join(1, 4096, 12);
  Participant& b = c.Join(2, 16 * kMiB, 13);
  // Once its contribution is in, the victim only downloads: stop it there
  // (its download stalls), then kill it.
  ASSERT_TRUE(
      c.WaitForEvent("contribution_complete", {{"rank", 1}}, absl::Seconds(60)))
      << c.server().Log();
  ASSERT_EQ(::kill(victim.pid, SIGSTOP), 0);
  const absl::Time stopped = absl::Now();
  // Every contribution is in, so the others commit: a rank lost after its
  // contribution costs the others nothing.
  const absl::Duration bound = absl::Seconds(30);
  for (Participant* p : {&a, &b}) {
    EXPECT_EQ(c.Exit(*p, bound), 0) << c.Log(*p);
    c.ExpectGathered(*p, {&a, &victim, &b});
  }
  ReportFault("kill -9 participant mid-download (others)", bound,
              SecondsSince(stopped));
  ASSERT_EQ(::kill(victim.pid, SIGKILL), 0);
  EXPECT_EQ(c.Exit(victim, absl::Seconds(10)), 128 + SIGKILL)
      << "the victim finished its download before the kill";
  // The round committed once, with the victim's contribution; nobody got
  // an error, so there is no culprit to name.
  EXPECT_EQ(c.CountEvents("round_completed", {{"seq", 0}}), 1);
  EXPECT_EQ(c.CountEvents("round_failed", nlohmann::json::object()), 0);
  c.ExpectNextRoundWorks(110);
  c.StopAndVerifyAudit();
}

TEST(FaultTest, StoppedParticipantIsLostAfterTheHeartbeatTimeout) {
  FaultCluster c(3);
  Participant& victim = c.Join(1, 4096, 21);
  ASSERT_TRUE(c.WaitForEvent("member_joined",
                             {{"identity", "spiffe://fedgather/site-2"}},
                             absl::Seconds(60)));
  // Hung, not dead: its connection stays open and it says nothing.
  ASSERT_EQ(::kill(victim.pid, SIGSTOP), 0);
  const absl::Time stopped = absl::Now();
  Participant& a = c.Join(0, 4096, 20);
  Participant& b = c.Join(2, 4096, 22);
  const absl::Duration bound = kHeartbeatTimeout + absl::Seconds(10);
  for (Participant* p : {&a, &b}) {
    EXPECT_EQ(c.Exit(*p, bound), 1) << c.Log(*p);
    EXPECT_THAT(c.Log(*p),
                HasSubstr(absl::StrCat(kSite2, " sent no heartbeat")));
  }
  ReportFault("kill -STOP participant", bound, SecondsSince(stopped));
  // Woken up, the hung peer learns it was dropped, and exits.
  ASSERT_EQ(::kill(victim.pid, SIGCONT), 0);
  EXPECT_EQ(c.Exit(victim, absl::Seconds(30)), 1) << c.Log(victim);
  c.ExpectNextRoundWorks(120);
  c.StopAndVerifyAudit();
}

TEST(FaultTest, ServerKilledMidRoundAndRestartedLosesNothing) {
  FaultCluster c(3);
  std::vector<Participant*> all;
  for (int site = 0; site < 3; ++site) {
    all.push_back(&c.Join(site, 32 * kMiB, 30 + site));
  }
  // Kill it once a third of the round is journaled (round seq 0).
  const std::string journal =
      c.cluster().dir() + "/state/groups/demo/round-0.journal";
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (ReadFileToString(journal).value_or("").size() < 32 * kMiB &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const int port = c.server().port();
  c.server().Kill();
  const absl::Time killed = absl::Now();
  c.server().Start(port);
  const absl::Duration bound = absl::Seconds(60);
  for (Participant* p : all) EXPECT_EQ(c.Exit(*p, bound), 0) << c.Log(*p);
  ReportFault("kill -9 server mid-round, restart with --state-dir", bound,
              SecondsSince(killed));
  for (Participant* p : all) c.ExpectGathered(*p, {all[0], all[1], all[2]});
  EXPECT_EQ(c.CountEvents("group_restored", {{"group", "demo"}}), 1)
      << c.server().Log();
  c.ExpectNextRoundWorks(130);
  c.StopAndVerifyAudit();
}

TEST(FaultTest, SlowlorisConnectionsAndStreamsAreClosed) {
  FaultCluster c(3);
  // TCP connections that never start their TLS handshake.
  std::vector<int> idle;
  for (int i = 0; i < 20; ++i) idle.push_back(ConnectTcp(c.server().port()));
  // Authenticated streams that never send their first message.
  auto stub = c.StubFor(TestCluster::Site(1));
  grpc::ClientContext collective_context, session_context;
  auto collective = stub->Collective(&collective_context);
  auto session = stub->Session(&session_context);
  const absl::Time opened = absl::Now();
  // Meanwhile the server serves a round.
  c.ExpectNextRoundWorks(140);

  const absl::Duration bound = kFirstFrameTimeout + absl::Seconds(5);
  for (int fd : idle) {
    EXPECT_TRUE(ClosedWithin(fd, bound - (absl::Now() - opened)))
        << "a connection without a handshake is still open";
    ::close(fd);
  }
  v1::CollectiveFrame frame;
  EXPECT_FALSE(collective->Read(&frame));
  const grpc::Status collective_status = collective->Finish();
  v1::SessionEvent event;
  EXPECT_FALSE(session->Read(&event));
  const grpc::Status session_status = session->Finish();
  ReportFault("slowloris (20 TCP, 1 collective, 1 session)", bound,
              SecondsSince(opened));
  EXPECT_LT(absl::Now() - opened, bound);
  EXPECT_EQ(collective_status.error_code(), grpc::DEADLINE_EXCEEDED);
  EXPECT_EQ(collective_status.error_message(),
            "the collective stream sent no header within 2s");
  EXPECT_EQ(session_status.error_code(), grpc::DEADLINE_EXCEEDED);
  EXPECT_EQ(session_status.error_message(),
            "the session sent no join within 2s");
  // The server logs the refusals after finishing the streams: wait for it.
  for (const char* refusal : {"collective_refused", "join_refused"}) {
    EXPECT_TRUE(c.WaitForEvent(refusal, {{"code", "DEADLINE_EXCEEDED"}},
                               absl::Seconds(10)))
        << refusal;
  }
  EXPECT_EQ(c.CountEvents("collective_refused",
                          {{"identity", "spiffe://fedgather/site-2"},
                           {"code", "DEADLINE_EXCEEDED"}}),
            1);
  EXPECT_EQ(
      c.CountEvents("join_refused", {{"identity", "spiffe://fedgather/site-2"},
                                     {"code", "DEADLINE_EXCEEDED"}}),
      1);
  c.ExpectNextRoundWorks(141);
  c.StopAndVerifyAudit();
}

TEST(FaultTest, FiveHundredGarbageConnectionsAreRefusedWhileARoundRuns) {
  FaultCluster c(3);
  absl::StatusOr<ProcessStats> before =
      ReadSettledProcessStats(c.server().pid(), absl::Seconds(10));
  ASSERT_TRUE(before.ok()) << before.status();
  std::atomic<int> closed{0};
  const absl::Duration bound = kFirstFrameTimeout + absl::Seconds(10);
  const absl::Time start = absl::Now();
  std::vector<std::thread> attackers;
  for (int t = 0; t < 10; ++t) {
    attackers.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const int fd = ConnectTcp(c.server().port());
        const std::vector<uint8_t> garbage = RandomBytes(517, t * 50 + i);
        if (::write(fd, garbage.data(), garbage.size()) > 0 &&
            ClosedWithin(fd, bound)) {
          ++closed;
        }
        ::close(fd);
      }
    });
  }
  c.ExpectNextRoundWorks(150);  // while they attack
  for (std::thread& t : attackers) t.join();
  ReportFault("500 garbage connections", bound, SecondsSince(start));
  EXPECT_EQ(closed.load(), 500);
  // The server let go of every one of them.
  absl::StatusOr<ProcessStats> after =
      ReadSettledProcessStats(c.server().pid(), absl::Seconds(10));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_LE(after->fds, before->fds + 4)
      << "before: " << before->ToString() << "; after: " << after->ToString();
  c.ExpectNextRoundWorks(151);
  c.StopAndVerifyAudit();
}

// Issue 18, finding 5: connections that never finish a handshake, or
// finish it and then open no call, must not pile up, and one address must
// not hold more than its cap. Attackers connect from 127.0.0.2 and
// 127.0.0.3; the members (and 20 silent gRPC channels) from 127.0.0.1.
TEST(FaultTest, SilentConnectionsAreClosedAndCappedWhileRoundsRun) {
  // Long enough that, even under a sanitizer on a loaded machine, no silent
  // connection is closed before the peak is read (CI saw 3 s fall short).
  constexpr absl::Duration kIdle = absl::Seconds(10);
  constexpr int kPerAddress = 32, kOverCap = 20, kAnonymous = 50,
                kChannels = 20;
  FaultCluster c(
      3, {"--connection-idle-timeout", "10", "--max-connections-per-address",
          "32", "--metrics-listen", "127.0.0.1:0"});
  const int metrics = MetricsPort(c);
  ASSERT_GT(metrics, 0) << c.server().Log();
  absl::StatusOr<ProcessStats> before =
      ReadSettledProcessStats(c.server().pid(), absl::Seconds(10));
  ASSERT_TRUE(before.ok()) << before.status();
  const int port = c.server().port();
  TlsProbeOptions member;
  member.tls_dir = c.cluster().dir() + "/" + TestCluster::Site(1);

  // (a) No client certificate: refused at the handshake, at once.
  TlsProbeOptions anonymous = member;
  anonymous.anonymous = true;
  anonymous.source = "127.0.0.3";
  const absl::Duration refusal_bound = absl::Seconds(5);
  const absl::Time anonymous_start = absl::Now();
  for (int i = 0; i < kAnonymous; ++i) {
    std::unique_ptr<TlsProbe> probe = TlsProbe::Open(port, anonymous);
    EXPECT_FALSE(probe->reached_http2())
        << "an anonymous client reached HTTP/2";
    EXPECT_TRUE(probe->ClosedWithin(refusal_bound))
        << "a connection without a client certificate is still open";
  }
  ReportFault("50 TLS connections without a client certificate", refusal_bound,
              SecondsSince(anonymous_start));

  // (b) A valid certificate, a completed handshake, no call: silent gRPC
  // channels (which answer the server's pings) and silent raw connections.
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < kChannels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channels.push_back(grpc::CreateCustomChannel(
        c.server().address(),
        MakeChannelCredentials(c.cluster().TlsFor(TestCluster::Site(1))),
        args));
    EXPECT_TRUE(channels.back()->WaitForConnected(
        absl::ToChronoTime(absl::Now() + absl::Seconds(10))));
  }
  TlsProbeOptions attacker = member;
  attacker.source = "127.0.0.2";
  std::vector<std::unique_ptr<TlsProbe>> admitted;
  absl::Time first_admitted_at;
  for (int i = 0; i < kPerAddress; ++i) {
    admitted.push_back(TlsProbe::Open(port, attacker));
    if (i == 0) first_admitted_at = absl::Now();
    EXPECT_TRUE(admitted.back()->reached_http2())
        << "connection " << i << " under the cap: " << admitted.back()->error();
  }
  const absl::Time admitted_at = absl::Now();
  absl::StatusOr<ProcessStats> peak = ReadProcessStats(c.server().pid());
  ASSERT_TRUE(peak.ok()) << peak.status();
  // (c) Beyond the cap of 127.0.0.2: refused before the TLS handshake.
  const absl::Time over_cap_start = absl::Now();
  for (int i = 0; i < kOverCap; ++i) {
    std::unique_ptr<TlsProbe> probe = TlsProbe::Open(port, attacker);
    EXPECT_FALSE(probe->reached_http2())
        << "connection " << i << " over the cap was admitted";
    EXPECT_TRUE(probe->ClosedWithin(refusal_bound));
  }
  const double over_cap_seconds = SecondsSince(over_cap_start);
  // (d) Members from 127.0.0.1 are not affected.
  c.ExpectNextRoundWorks(170);

  // The idle limit closes every silent connection.
  const absl::Duration idle_bound = kIdle + absl::Seconds(10);
  EXPECT_TRUE(
      admitted.front()->ClosedWithin(idle_bound - (absl::Now() - admitted_at)));
  const absl::Duration first_closed = absl::Now() - first_admitted_at;
  for (auto& probe : admitted) {
    EXPECT_TRUE(probe->ClosedWithin(idle_bound - (absl::Now() - admitted_at)))
        << "an idle authenticated connection is still open";
  }
  // The channels' connections are closed on the server's side (their fds
  // are gone below); the channels stay alive, so it is not their doing.
  const int after = FdsAfter(c.server().pid(), before->fds + 4,
                             idle_bound - (absl::Now() - admitted_at));
  ReportFault(absl::StrCat(kPerAddress, " idle TLS + ", kChannels,
                           " idle gRPC channels (fds ", before->fds, " -> ",
                           peak->fds, " -> ", after, ")"),
              idle_bound, absl::ToDoubleSeconds(absl::Now() - admitted_at));
  EXPECT_LE(after, before->fds + 4) << "before: " << before->ToString();
  EXPECT_GE(peak->fds, before->fds + kPerAddress + kChannels);
  // Closed by the idle limit, not by anything sooner (the first connection's
  // idle time starts a little before this test reads its SETTINGS).
  EXPECT_GE(first_closed, kIdle - absl::Seconds(1));

  const std::string text = Scrape(metrics);
  EXPECT_GE(
      MetricValue(text,
                  "fedgather_connections_refused_total{limit=\"per_address\"}"),
      kOverCap)
      << text;
  ReportFault(absl::StrCat(kOverCap, " connections over the cap of ",
                           kPerAddress, " per address"),
              refusal_bound, over_cap_seconds);
  EXPECT_EQ(
      MetricAfter(metrics, "fedgather_connections_open", 0, absl::Seconds(10)),
      0);
  // One log line sums the refusals up, not one per connection.
  const std::optional<nlohmann::json> refused =
      c.WaitForEvent("connections_refused", {{"code", "RESOURCE_EXHAUSTED"}},
                     absl::Seconds(10));
  ASSERT_TRUE(refused.has_value()) << c.server().Log();
  EXPECT_THAT(refused->dump(), HasSubstr("127.0.0.2"));
  EXPECT_LE(c.CountEvents("connections_refused", nlohmann::json::object()), 2);
  c.ExpectNextRoundWorks(171);
  c.StopAndVerifyAudit();
}

// The total cap: beyond it, every address is refused, until connections
// close.
TEST(FaultTest, ConnectionsBeyondTheTotalCapAreRefused) {
  constexpr int kTotal = 8;
  FaultCluster c(3, {"--connection-idle-timeout", "5", "--max-connections", "8",
                     "--metrics-listen", "127.0.0.1:0"});
  const int metrics = MetricsPort(c);
  ASSERT_GT(metrics, 0) << c.server().Log();
  TlsProbeOptions attacker;
  attacker.tls_dir = c.cluster().dir() + "/" + TestCluster::Site(1);
  std::vector<std::unique_ptr<TlsProbe>> admitted;
  for (int i = 0; i < kTotal; ++i) {
    attacker.source = absl::StrCat("127.0.1.", i + 1);
    admitted.push_back(TlsProbe::Open(c.server().port(), attacker));
    EXPECT_TRUE(admitted.back()->reached_http2()) << admitted.back()->error();
  }
  attacker.source = "127.0.2.1";
  std::unique_ptr<TlsProbe> over = TlsProbe::Open(c.server().port(), attacker);
  EXPECT_FALSE(over->reached_http2()) << "a connection over the total cap";
  EXPECT_TRUE(over->ClosedWithin(absl::Seconds(5)));
  EXPECT_EQ(MetricValue(Scrape(metrics),
                        "fedgather_connections_refused_total{limit=\"total\"}"),
            1);
  // Once the idle limit has closed them, the server admits again.
  const absl::Duration bound = absl::Seconds(5 + 10);
  for (auto& probe : admitted) EXPECT_TRUE(probe->ClosedWithin(bound));
  EXPECT_EQ(
      MetricAfter(metrics, "fedgather_connections_open", 0, absl::Seconds(10)),
      0);
  c.ExpectNextRoundWorks(180);
  c.StopAndVerifyAudit();
}

TEST(FaultTest, HugeDeclaredSizeWithLittleSentFailsAtTheDeadline) {
  FaultCluster c(3, {"--round-timeout", "8"});
  Participant& a = c.Join(0, 4096, 40);
  Participant& b = c.Join(2, 4096, 42);
  // site-2 is this test: a member that declares 4 GiB and sends 1 MiB.
  std::unique_ptr<Client> client =
      c.cluster().ConnectVia(TestCluster::Site(1), c.server().address());
  absl::StatusOr<std::unique_ptr<Group>> group =
      client->Join({"demo", 3, std::nullopt, absl::Seconds(60)});
  ASSERT_TRUE(group.ok()) << group.status();
  constexpr int64_t kDeclared = int64_t{4} << 30;
  auto stub = c.StubFor(TestCluster::Site(1));
  grpc::ClientContext context;
  auto stream = stub->Collective(&context);
  v1::CollectiveFrame header;
  v1::CollectiveHeader* h = header.mutable_header();
  h->set_group("demo");
  h->set_epoch((*group)->epoch());
  h->set_seq(0);
  h->set_op(v1::ALL_GATHER_BYTES);
  h->set_rank(1);
  h->set_digest_algorithm(v1::DIGEST_BLAKE3);
  v1::TensorSpec* spec = h->add_tensors();
  spec->set_name("bytes");
  spec->set_dtype(v1::U8);
  spec->add_shape(kDeclared);
  ASSERT_TRUE(stream->Write(header));
  v1::CollectiveFrame chunk;
  chunk.mutable_chunk()->set_rank(1);
  chunk.mutable_chunk()->set_data(std::string(kMiB, 'x'));
  ASSERT_TRUE(stream->Write(chunk));
  const absl::Time sent = absl::Now();
  const int64_t rss_kib = RssKiB(c.server().pid());
  // The others hold a buffer of the declared size, untouched but for the
  // 1 MiB that came (client/part_buffer.h).
  absl::SleepFor(absl::Seconds(1));
  for (Participant* p : {&a, &b}) {
    const int64_t participant_kib = RssKiB(p->pid);
    EXPECT_LT(participant_kib, 512 * 1024)
        << TestCluster::Site(p->site) << " RSS " << participant_kib << " KiB";
  }

  // The round's deadline, plus the participants' exit (slow under ASan).
  const absl::Duration bound = absl::Seconds(8 + 15);
  const std::string missing =
      absl::StrCat(kSite2, ": ", kMiB, " of ", kDeclared, " bytes");
  for (Participant* p : {&a, &b}) {
    EXPECT_EQ(c.Exit(*p, bound), 1) << c.Log(*p);
    EXPECT_THAT(c.Log(*p), HasSubstr("DEADLINE_EXCEEDED"));
    EXPECT_THAT(c.Log(*p), HasSubstr(missing));
  }
  v1::CollectiveFrame ignored;
  while (stream->Read(&ignored)) {
  }
  const grpc::Status status = stream->Finish();
  ReportFault("declares 4 GiB, sends 1 MiB", bound, SecondsSince(sent));
  EXPECT_EQ(status.error_code(), grpc::DEADLINE_EXCEEDED);
  EXPECT_THAT(status.error_message(), HasSubstr(missing));
  // Nothing was allocated for the declared size.
  EXPECT_LT(rss_kib, 512 * 1024) << "server RSS " << rss_kib << " KiB";
  std::cout << "server RSS with 4 GiB declared: " << rss_kib / 1024 << " MiB"
            << std::endl;
  group->reset();
  client.reset();
  c.ExpectNextRoundWorks(160);
  c.StopAndVerifyAudit();
}

}  // namespace
}  // namespace fedgather::testing
