// Process-level faults on the direct data plane (issue 21): `fedgather join`
// processes that offer peer endpoints gather over their ring of mutual-TLS
// peer links while a real fedgather-server process keeps the control
// frames (tests/faults/fault_cluster.h). One member is killed with SIGKILL
// while the parts go round the ring:
//   - every survivor exits within the bound with the same status, naming
//     the dead member;
//   - the round never commits;
//   - the next round works, byte for byte, and the audit chain verifies.
// Prints "FAULT <case>: bound B, observed O" for the fault matrix.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <iostream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "tests/faults/fault_cluster.h"

namespace fedgather::testing {
namespace {

using ::testing::HasSubstr;

constexpr size_t kMiB = 1 << 20;

TEST(DirectPlaneFaultTest, AMemberKilledMidRingFailsEveryOtherOneAlike) {
  FaultCluster c(3);
  const std::vector<std::string> offer = {"--peer-listen", "127.0.0.1:0"};
  // 96 MiB each: the ring carries 192 MiB per link, which takes well over
  // the event log's latency on loopback TLS.
  Participant& a = c.Join(0, 96 * kMiB, 31, "", {}, offer);
  Participant& victim = c.Join(1, 96 * kMiB, 32, "", {}, offer);
  Participant& b = c.Join(2, 96 * kMiB, 33, "", {}, offer);
  // Every rank's end (its claim) is in once the server logs its
  // contribution_complete; each rank's ring runs from its own end on.
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_TRUE(c.WaitForEvent("contribution_complete", {{"rank", rank}},
                               absl::Seconds(60)))
        << c.server().Log();
  }
  ASSERT_EQ(::kill(victim.pid, SIGKILL), 0);
  const absl::Time killed = absl::Now();
  EXPECT_EQ(c.DataPlaneChosen(), "direct") << c.server().Log();
  EXPECT_EQ(c.Exit(victim, absl::Seconds(10)), 128 + SIGKILL);
  // The survivors' links to and from the victim break at once (its
  // sockets close); a stalled link would take the stall time (5 s), and a
  // silent session the heartbeat timeout.
  const absl::Duration bound = kHeartbeatTimeout + absl::Seconds(15);
  std::vector<std::string> errors;
  for (Participant* p : {&a, &b}) {
    EXPECT_EQ(c.Exit(*p, bound), 1) << c.Log(*p);
    errors.push_back(JoinErrorLine(c.Log(*p)));
    // The first failure the server heard of: a link of the dead member's
    // (every run so far), or one a survivor broke after it failed
    // (docs/protocol.md, "Peer links"), or the dead member's session.
    EXPECT_THAT(
        errors.back(),
        ::testing::AnyOf(HasSubstr("rank 1"), HasSubstr("reports: the link ")))
        << c.Log(*p);
  }
  EXPECT_EQ(errors[0], errors[1]) << "the survivors got different statuses";
  std::cout << "the survivors' status: " << errors[0] << "\n";
  ReportFault("kill -9 member mid-ring (direct plane)", bound,
              SecondsSince(killed));
  EXPECT_EQ(c.CountEvents("round_completed", nlohmann::json::object()), 0)
      << "the round committed before the kill: not mid-ring";
  c.ExpectNextRoundWorks(130);
  c.StopAndVerifyAudit();
}

}  // namespace
}  // namespace fedgather::testing
