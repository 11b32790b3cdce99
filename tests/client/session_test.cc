// Session (client/session.h) against a real server in this process over
// mutual TLS on 127.0.0.1:0, with certificates from our own provisioning
// (tests/e2e/test_cluster.h): the join, the membership it reports, a
// refusal, and a leave that ends the epoch for the others.
#include "client/session.h"

#include <gmock/gmock.h>
#include <grpcpp/create_channel.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/tls_credentials.h"
#include "tests/e2e/test_cluster.h"

namespace fedgather::testing {
namespace {

// A channel of its own (its own connection) for `name`, as Client makes.
std::shared_ptr<grpc::Channel> ChannelFor(const TestCluster& cluster,
                                          const std::string& name) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(
      cluster.address(), MakeChannelCredentials(cluster.TlsFor(name)), args);
}

v1::JoinRequest JoinDemo(int world_size, int rank) {
  v1::JoinRequest request;
  request.set_group("demo");
  request.set_world_size(world_size);
  request.set_requested_rank(rank);
  return request;
}

std::unique_ptr<Session> NewSession(const TestCluster& cluster,
                                    const std::string& name) {
  return std::make_unique<Session>(ChannelFor(cluster, name), cluster.address(),
                                   "demo", absl::Seconds(10), SystemClock());
}

// JoinAll joins site-1..site-n to "demo" at ranks 0..n-1, one thread
// each; fails the test unless every join succeeded.
std::vector<std::unique_ptr<Session>> JoinAll(const TestCluster& cluster,
                                              int n) {
  std::vector<std::unique_ptr<Session>> sessions;
  for (int r = 0; r < n; ++r) {
    sessions.push_back(NewSession(cluster, TestCluster::Site(r)));
  }
  std::vector<absl::Status> joined(n);
  RunRanks(n, [&](int r) {
    joined[r] =
        sessions[r]->Join(JoinDemo(n, r), absl::Seconds(30), absl::Seconds(10));
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(joined[r].ok()) << joined[r];
  return sessions;
}

// WaitEnded waits (at most `timeout`) for `session` to end; returns why.
absl::Status WaitEnded(Session& session, absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  absl::Status status = session.Check();
  while (status.ok() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
    status = session.Check();
  }
  return status;
}

TEST(SessionTest, JoinReportsTheSameMembershipOnEveryRank) {
  TestCluster cluster(ClusterOptions(3));
  std::vector<std::unique_ptr<Session>> sessions = JoinAll(cluster, 3);
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (int r = 0; r < 3; ++r) {
    const Session& s = *sessions[r];
    EXPECT_EQ(s.name(), "demo");
    EXPECT_EQ(s.rank(), r);
    EXPECT_EQ(s.world_size(), 3);
    EXPECT_EQ(s.epoch(), sessions[0]->epoch());
    EXPECT_GT(s.max_chunk_bytes(), 0);
    EXPECT_EQ(s.identities(), sessions[0]->identities());
    ASSERT_EQ(s.identities().size(), 3u);
    EXPECT_THAT(s.identities()[r], ::testing::HasSubstr(TestCluster::Site(r)));
    EXPECT_TRUE(sessions[r]->Check().ok());
  }
}

TEST(SessionTest, AnIdentityOutsideThePolicyIsRefused) {
  ClusterOptions options(2);
  options.extra = {"outsider"};
  TestCluster cluster(options);
  std::unique_ptr<Session> session = NewSession(cluster, "outsider");
  const absl::Status joined =
      session->Join(JoinDemo(2, 0), absl::Seconds(30), absl::Seconds(10));
  EXPECT_EQ(joined.code(), absl::StatusCode::kPermissionDenied) << joined;
}

TEST(SessionTest, ALeaveEndsTheEpochForTheOthers) {
  TestCluster cluster(ClusterOptions(2));
  std::vector<std::unique_ptr<Session>> sessions = JoinAll(cluster, 2);
  ASSERT_FALSE(::testing::Test::HasFailure());

  sessions[1]->BeginLeave();
  sessions[1]->Leave();
  // The leaver's own session reads CANCELLED once its reader has ended.
  const absl::Status left = WaitEnded(*sessions[1], absl::Seconds(20));
  EXPECT_EQ(left.code(), absl::StatusCode::kCancelled) << left;
  // The other member's session ends with the server's word, not a resume.
  const absl::Status ended = WaitEnded(*sessions[0], absl::Seconds(20));
  EXPECT_EQ(ended.code(), absl::StatusCode::kUnavailable) << ended;
  sessions.clear();  // joins their threads
}

}  // namespace
}  // namespace fedgather::testing
