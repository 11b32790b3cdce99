// Operability end to end over real mutual TLS: the Prometheus metrics
// scraped during and after a round, a drain (health NOT_SERVING, new joins
// refused, the round in flight finishing or, past the drain timeout,
// aborted on every rank), and SIGTERM to a real server process with a
// round in flight.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/file_io.h"
#include "tests/e2e/metrics_scrape.h"
#include "tests/e2e/server_process.h"
#include "tests/e2e/test_cluster.h"

namespace fedgather::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kBytes = 1 << 20;

// Gathers kBytes from each rank of `group`; each rank's byte is its rank.
absl::Status Gather(Group& group) {
  const int world = group.world_size();
  std::vector<uint8_t> in(kBytes, static_cast<uint8_t>(group.rank()));
  std::vector<uint8_t> out(world * kBytes);
  const ConstHostTensor input{{"w", DType::kU8, {kBytes}}, in.data()};
  const MutableHostTensor output{{"w", DType::kU8, {world, kBytes}},
                                 out.data()};
  if (absl::Status s = group.AllGatherInto({&input, 1}, {&output, 1});
      !s.ok()) {
    return s;
  }
  for (int r = 0; r < world; ++r) {
    for (int64_t i = 0; i < kBytes; i += 4093) {
      if (out[r * kBytes + i] != r) {
        return absl::DataLossError(absl::StrCat("rank ", r, " byte ", i));
      }
    }
  }
  return absl::OkStatus();
}

// RunWithRankOneLate runs Gather on both ranks of `members`; rank 1 starts
// once `before_rank_one` has returned (run on the test thread while rank 0
// waits in its round).
std::vector<absl::Status> RunWithRankOneLate(
    TestCluster& cluster, Members& members,
    const std::function<void()>& before_rank_one) {
  std::vector<absl::Status> status(2);
  std::thread zero([&] { status[0] = Gather(*members.groups[0]); });
  EXPECT_TRUE(cluster.events().WaitFor(
      [](const server::ServerEvent& e) {
        return e.kind == server::EventKind::kContributionComplete &&
               e.rank == 0;
      },
      absl::Seconds(30)));
  before_rank_one();
  status[1] = Gather(*members.groups[1]);
  zero.join();
  return status;
}

// JoinThrough joins both sites of `cluster` to group "demo" through the
// server process; returns their groups (null where a join failed, which
// fails the test) and keeps their clients in *clients.
std::vector<std::unique_ptr<Group>> JoinThrough(
    const TestCluster& cluster, const ServerProcess& server,
    std::vector<std::unique_ptr<Client>>* clients) {
  for (int r = 0; r < 2; ++r) {
    clients->push_back(
        cluster.ConnectVia(TestCluster::Site(r), server.address()));
  }
  std::vector<std::unique_ptr<Group>> groups(2);
  RunRanks(2, [&](int r) {
    auto group = (*clients)[r]->Join({"demo", 2, r, absl::Seconds(30)});
    EXPECT_TRUE(group.ok()) << group.status();
    if (group.ok()) groups[r] = *std::move(group);
  });
  return groups;
}

TEST(MetricsTest, ScrapedDuringAndAfterARound) {
  ClusterOptions options(2);
  options.metrics = true;
  options.audit = true;
  TestCluster cluster(options);
  const int port = cluster.server().metrics_port();
  ASSERT_GT(port, 0);
  Members members(cluster);
  std::string during;
  std::vector<absl::Status> status =
      RunWithRankOneLate(cluster, members, [&] { during = Scrape(port); });
  ASSERT_TRUE(status[0].ok()) << status[0];
  ASSERT_TRUE(status[1].ok()) << status[1];

  // During: one round in flight, rank 0's megabyte in, nothing completed.
  EXPECT_EQ(MetricValue(during, "fedgather_rounds_in_flight{group=\"demo\"}"),
            1)
      << during;
  EXPECT_EQ(
      MetricValue(during, "fedgather_rounds_started_total{group=\"demo\"}"), 1);
  EXPECT_EQ(
      MetricValue(during,
                  "fedgather_payload_bytes_received_total{group=\"demo\"}"),
      kBytes);
  EXPECT_EQ(
      MetricValue(during, "fedgather_rounds_completed_total{group=\"demo\"}"),
      -1);
  EXPECT_EQ(
      MetricValue(during,
                  "fedgather_members{group=\"demo\",state=\"connected\"}"),
      2);
  EXPECT_EQ(MetricValue(during, "fedgather_streams_active{kind=\"session\"}"),
            2);
  EXPECT_EQ(
      MetricValue(during, "fedgather_streams_active{kind=\"collective\"}"), 1);
  EXPECT_EQ(MetricValue(during, "fedgather_buffered_bytes_limit"), 256 << 20);

  // After: one round completed, both megabytes in, each sent once to the
  // other rank (plus framing), the duration observed once.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::string after = Scrape(port);
  while (MetricValue(after, "fedgather_streams_active{kind=\"collective\"}") !=
             0 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    after = Scrape(port);
  }
  EXPECT_EQ(
      MetricValue(after, "fedgather_rounds_completed_total{group=\"demo\"}"), 1)
      << after;
  EXPECT_EQ(MetricValue(after, "fedgather_rounds_in_flight{group=\"demo\"}"),
            0);
  EXPECT_EQ(
      MetricValue(after,
                  "fedgather_payload_bytes_received_total{group=\"demo\"}"),
      2 * kBytes);
  const double sent =
      MetricValue(after, "fedgather_frame_bytes_sent_total{group=\"demo\"}");
  EXPECT_GT(sent, 2 * kBytes);
  EXPECT_LT(sent, 2 * kBytes + 4096);
  EXPECT_EQ(
      MetricValue(after,
                  "fedgather_round_duration_seconds_count{group=\"demo\"}"),
      1);
  EXPECT_EQ(
      MetricValue(after,
                  "fedgather_round_time_to_first_byte_seconds_count{group="
                  "\"demo\"}"),
      1);
  EXPECT_EQ(MetricValue(after, "fedgather_streams_active{kind=\"collective\"}"),
            0);
  EXPECT_GT(MetricValue(after, "fedgather_audit_records_written_total"), 0);
  // A refused join is counted by action and code, with no group label.
  std::unique_ptr<Client> stranger = cluster.Connect(TestCluster::Site(0));
  EXPECT_FALSE(stranger->Join({"nope", 2, 0, absl::Seconds(5)}).ok());
  EXPECT_EQ(
      MetricValue(Scrape(port),
                  "fedgather_denials_total{action=\"join\",reason=\"PERMISSION_"
                  "DENIED\"}"),
      1);
}

TEST(DrainTest, TheRoundInFlightFinishesThenTheEpochEnds) {
  TestCluster cluster(2);
  Members members(cluster);
  std::unique_ptr<Client> probe = cluster.Connect(TestCluster::Site(0));
  ASSERT_TRUE(probe->CheckHealth().ok());
  int aborted = -1;
  std::thread drain;
  std::vector<absl::Status> status = RunWithRankOneLate(cluster, members, [&] {
    drain = std::thread([&] {
      aborted = cluster.server().Drain(absl::Seconds(30)).rounds_failed;
    });
    // The health service says so at once, and new joins are refused.
    absl::Status health = probe->CheckHealth();
    for (int i = 0; i < 500 && health.ok(); ++i) {
      absl::SleepFor(absl::Milliseconds(10));
      health = probe->CheckHealth();
    }
    EXPECT_EQ(health.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(std::string(health.message()), HasSubstr("NOT_SERVING"));
    absl::StatusOr<std::unique_ptr<Group>> late =
        probe->Join({"demo", 2, 0, absl::Seconds(5)});
    EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(std::string(late.status().message()),
                HasSubstr("shutting down"));
  });
  drain.join();
  EXPECT_TRUE(status[0].ok()) << status[0];
  EXPECT_TRUE(status[1].ok()) << status[1];
  EXPECT_EQ(aborted, 0);
  // The epoch ended with the drain: the next collective is refused.
  const absl::Status next = Gather(*members.groups[0]);
  EXPECT_FALSE(next.ok());
  EXPECT_THAT(std::string(next.message()), HasSubstr("shutting down"));
}

TEST(DrainTest, PastTheDrainTimeoutEveryRankGetsUnavailable) {
  TestCluster cluster(2);
  Members members(cluster);
  std::vector<absl::Status> status = RunWithRankOneLate(cluster, members, [&] {
    EXPECT_EQ(cluster.server().Drain(absl::Milliseconds(300)).rounds_failed, 1);
  });
  // Rank 0's round failed; rank 1 came after its epoch had ended.
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(status[r].code(), absl::StatusCode::kUnavailable) << status[r];
    EXPECT_THAT(std::string(status[r].message()), HasSubstr("shutting down"));
  }
  EXPECT_THAT(std::string(status[0].message()),
              HasSubstr("was still in flight when the server's drain timeout "
                        "(300ms) ran out"));
}

TEST(DrainTest, SigtermLetsARoundInFlightFinishAndExitsZero) {
  ClusterOptions options(2);
  options.in_process_server = false;
  TestCluster cluster(options);
  ServerProcess server(cluster, {"--drain-timeout", "30"});
  server.Start(0);
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::unique_ptr<Group>> groups =
      JoinThrough(cluster, server, &clients);
  ASSERT_NE(groups[0], nullptr);
  ASSERT_NE(groups[1], nullptr);
  std::vector<absl::Status> status(2);
  std::thread zero([&] { status[0] = Gather(*groups[0]); });
  // Rank 0 waits in the round; SIGTERM arrives; then rank 1 contributes.
  const absl::Time uploaded = absl::Now() + absl::Seconds(30);
  while (server.Log().find("\"event\":\"contribution_complete\"") ==
             std::string::npos &&
         absl::Now() < uploaded) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  int exit_code = -2;
  std::thread stop([&] { exit_code = server.Stop(absl::Seconds(60)); });
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (server.Log().find("draining") == std::string::npos &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  status[1] = Gather(*groups[1]);
  zero.join();
  stop.join();
  EXPECT_TRUE(status[0].ok()) << status[0] << "\n" << server.Log();
  EXPECT_TRUE(status[1].ok()) << status[1];
  EXPECT_EQ(exit_code, 0) << server.Log();
  EXPECT_THAT(server.Log(), HasSubstr("draining (up to 30 s)"));
  EXPECT_THAT(server.Log(), HasSubstr("drained, stopping"));
}

TEST(LogTest, JsonLinesWithoutTensorBytesOrKeyMaterial) {
  ClusterOptions options(2);
  options.in_process_server = false;
  TestCluster cluster(options);
  ServerProcess server(cluster,
                       {"--log-format", "json", "--log-level", "debug"});
  server.Start(0);
  const std::string secret = "FEDGATHER-SECRET-7f3a9c";
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::unique_ptr<Group>> groups =
      JoinThrough(cluster, server, &clients);
  RunRanks(2, [&](int r) {
    ASSERT_NE(groups[r], nullptr);
    Group* group = groups[r].get();
    auto gathered = group->AllGatherBytes(absl::StrCat(secret, r));
    ASSERT_TRUE(gathered.ok()) << gathered.status();
    EXPECT_EQ((*gathered)[1 - r], absl::StrCat(secret, 1 - r));
    auto barrier = group->AllGatherBytes("");
    ASSERT_TRUE(barrier.ok()) << barrier.status();
  });
  ASSERT_EQ(server.Stop(absl::Seconds(30)), 0);
  const std::string log = server.Log();
  EXPECT_EQ(log.find(secret), std::string::npos) << log;
  EXPECT_EQ(log.find("PRIVATE KEY"), std::string::npos);
  // Nor any line of the server's or a participant's private key.
  for (const std::string& key :
       {cluster.dir() + "/server/key.pem", cluster.dir() + "/site-1/key.pem"}) {
    const std::string pem = ReadFileToString(key).value();
    for (absl::string_view line : absl::StrSplit(pem, '\n')) {
      if (line.size() > 16 && !absl::StartsWith(line, "-----")) {
        EXPECT_EQ(log.find(std::string(line)), std::string::npos) << key;
      }
    }
  }
  // Every line is a JSON object with a time and a level; round events
  // carry the group, epoch, seq and rank.
  int round_events = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n', absl::SkipEmpty())) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    ASSERT_TRUE(record.is_object()) << line;
    EXPECT_TRUE(record.contains("time")) << line;
    EXPECT_TRUE(record.contains("level")) << line;
    if (record.value("event", "") == "contribution_complete") {
      ++round_events;
      EXPECT_EQ(record.value("group", ""), "demo") << line;
      EXPECT_EQ(record.value("epoch", 0), 1) << line;
      EXPECT_TRUE(record.contains("seq")) << line;
      EXPECT_TRUE(record.contains("rank")) << line;
    }
  }
  EXPECT_EQ(round_events, 4);  // two rounds of two ranks
}

TEST(ConfigTest, TheExampleConfigLoadsAndFlagsTakePrecedence) {
  const std::string example = std::string(FEDGATHER_SOURCE_DIR) +
                              "/deploy/fedgather-server.example.yaml";
  std::string out, err;
  ASSERT_EQ(RunServerBinary({"--config", example, "--listen", "127.0.0.1:7",
                             "--check-config"},
                            &out, &err),
            0)
      << err;
  // The file's settings, except the one the command line overrides.
  EXPECT_THAT(out, HasSubstr("listen: 127.0.0.1:7\n"));
  EXPECT_THAT(out, HasSubstr("state-dir: /var/lib/fedgather/state\n"));
  EXPECT_THAT(out, HasSubstr("metrics-listen: 0.0.0.0:9090\n"));
  EXPECT_THAT(out, HasSubstr("audit-fsync: group\n"));
  EXPECT_THAT(out, HasSubstr("log-format: json\n"));

  // A key that is no flag is refused, by name.
  const std::string bad = ::testing::TempDir() + "bad-config.yaml";
  ASSERT_TRUE(
      WriteStringToFile(bad, "listen: 0.0.0.0:1\nlisten-port: 9\n").ok());
  EXPECT_EQ(RunServerBinary({"--config", bad, "--check-config"}, &out, &err),
            2);
  EXPECT_THAT(err, HasSubstr("--config: unknown key 'listen-port'"));
  // So is a file that is not a map.
  ASSERT_TRUE(WriteStringToFile(bad, "- listen\n").ok());
  EXPECT_EQ(RunServerBinary({"--config", bad, "--check-config"}, &out, &err),
            2);
  EXPECT_THAT(err, HasSubstr("must be a map of flag names to values"));
}

}  // namespace
}  // namespace fedgather::testing
