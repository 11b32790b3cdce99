// The audit log's failure policy end to end, over real mutual TLS on
// 127.0.0.1: when the audit log cannot be written (writes fail with ENOSPC
// through the log's file-call seam, tests/server/observe/failing_audit_disk.h),
// a round already in flight finishes, a new round and a new join are refused
// with UNAVAILABLE naming the audit log, the health service says
// NOT_SERVING and the server's log says so once. Once writes work again the
// log catches up, rounds and joins work, and the whole chain verifies with
// the server's certificate, its "audit_gap" record saying what happened.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/audit_chain.h"
#include "common/file_io.h"
#include "tests/e2e/test_cluster.h"
#include "tests/server/observe/failing_audit_disk.h"

namespace fedgather::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kRefusal[] =
    "the audit log cannot be written: write audit file ";

bool HasKind(const server::ServerEvent& event, server::EventKind kind) {
  return event.kind == kind;
}

TEST(AuditFailureTest, AnUnwritableAuditLogFailsClosedAndRecovers) {
  server::FailingAuditDisk disk;
  ClusterOptions options(2);
  options.audit = true;
  options.audit_file = disk.Calls();
  options.audit_retry_period = absl::Milliseconds(20);
  TestCluster cluster(options);
  Members members(cluster);
  members.ExpectNextRoundWorks();
  auto probe = Client::Connect(
      {cluster.address(), ReadTlsDir(cluster.dir() + "/server").value()});
  ASSERT_TRUE(probe.ok()) << probe.status();
  ASSERT_TRUE((*probe)->CheckHealth().ok());

  // The disk fills up. The next round's records cannot be written, but the
  // round had started: it finishes on every rank.
  disk.write_errno = ENOSPC;
  members.ExpectNextRoundWorks();
  ASSERT_TRUE(cluster.events().WaitFor(
      [](const server::ServerEvent& e) {
        return HasKind(e, server::EventKind::kAuditUnwritable);
      },
      absl::Seconds(30)));

  // No new round, on any rank, and no new join; the epoch stays.
  const std::vector<absl::Status> refused =
      members.Run([&](int rank) { return GatherRanks(*members.groups[rank]); });
  ExpectSameStatusEverywhere(refused, absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused[0].message()), HasSubstr(kRefusal));
  EXPECT_THAT(std::string(refused[0].message()),
              HasSubstr("the server admits no joins or rounds until it can"));
  std::unique_ptr<Client> newcomer = cluster.Connect(TestCluster::Site(0));
  const auto joined = newcomer->Join({"demo", 2, 0, absl::Seconds(30)});
  ASSERT_EQ(joined.status().code(), absl::StatusCode::kUnavailable)
      << joined.status();
  EXPECT_THAT(std::string(joined.status().message()), HasSubstr(kRefusal));
  const absl::Status health = (*probe)->CheckHealth();
  EXPECT_THAT(std::string(health.message()), HasSubstr("NOT_SERVING"));

  // Space again: the writer's retry catches up and the server serves.
  disk.write_errno = 0;
  ASSERT_TRUE(cluster.events().WaitFor(
      [](const server::ServerEvent& e) {
        return HasKind(e, server::EventKind::kAuditWritable);
      },
      absl::Seconds(30)));
  EXPECT_TRUE((*probe)->CheckHealth().ok());
  members.ExpectNextRoundWorks();

  cluster.StopServer();
  AuditVerifyOptions verify;
  verify.server_cert_pem =
      ReadFileToString(cluster.dir() + "/server/cert.pem").value();
  const absl::StatusOr<AuditVerifyReport> report =
      VerifyAuditFiles({cluster.audit_path()}, verify);
  ASSERT_TRUE(report.ok()) << report.status();
  int gaps = 0, commits = 0;
  for (const nlohmann::json& record : ReadAuditRecords(cluster.audit_path())) {
    if (record["action"] == "commit") ++commits;
    if (record["action"] != "audit_gap") continue;
    ++gaps;
    EXPECT_EQ(record["outcome"], "RESOURCE_EXHAUSTED");
    EXPECT_THAT(record["reason"].get<std::string>(),
                HasSubstr("No space left on device"));
    EXPECT_EQ(record["details"]["dropped"], "0");
  }
  EXPECT_EQ(gaps, 1);
  // The round that ran while the disk was full is recorded too.
  EXPECT_EQ(commits, 3);
}

}  // namespace
}  // namespace fedgather::testing
