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

TEST(SessionTest, TheRendezvousGivesEveryRankTheOffersPeerEndpoints) {
  ClusterOptions options(3);
  options.group_extra = "    peer_networks: [10.0.0.0/8, \"fd00::/8\"]\n";
  TestCluster cluster(options);
  // Rank 1 offers none: its place stays empty.
  const std::vector<std::string> offered = {"10.1.2.3:7000", "",
                                            "[fd00::9]:7002"};
  std::vector<std::unique_ptr<Session>> sessions;
  for (int r = 0; r < 3; ++r) {
    sessions.push_back(NewSession(cluster, TestCluster::Site(r)));
  }
  std::vector<absl::Status> joined(3);
  RunRanks(3, [&](int r) {
    v1::JoinRequest request = JoinDemo(3, r);
    request.set_peer_endpoint(offered[r]);
    joined[r] =
        sessions[r]->Join(request, absl::Seconds(30), absl::Seconds(10));
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(joined[r].ok()) << joined[r];
    EXPECT_EQ(sessions[r]->peer_endpoints(), offered) << "rank " << r;
  }
  // The status shows them too.
  auto client = cluster.Connect(TestCluster::Site(0));
  ASSERT_NE(client, nullptr);
  auto status = client->GetStatus("demo");
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->groups(0).members_size(), 3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(status->groups(0).members(r).peer_endpoint(), offered[r]);
  }
}

TEST(SessionTest, APeerEndpointOutsideTheGroupsNetworksOrMalformedIsRefused) {
  ClusterOptions options(2);
  options.group_extra = "    peer_networks: [10.0.0.0/8]\n";
  TestCluster cluster(options);
  struct Case {
    std::string endpoint;
    absl::StatusCode code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"169.254.169.254:80", absl::StatusCode::kPermissionDenied,
       "group 'demo' admits peer endpoints only at IP addresses in "
       "10.0.0.0/8 (its policy's peer_networks); '169.254.169.254:80' is "
       "not one"},
      // A name could resolve anywhere.
      {"site-1.internal:7000", absl::StatusCode::kPermissionDenied,
       "'site-1.internal:7000' is not one"},
      {"10.0.0.1", absl::StatusCode::kInvalidArgument,
       "is not HOST:PORT with a port 1..65535"},
      {"10.0.0.1:0", absl::StatusCode::kInvalidArgument,
       "is not HOST:PORT with a port 1..65535"},
      {"10.0.0.1:70000", absl::StatusCode::kInvalidArgument,
       "is not HOST:PORT"},
      {"10.0.0.1 :7000", absl::StatusCode::kInvalidArgument,
       "not printable ASCII"},
      {std::string(300, 'a') + ":1", absl::StatusCode::kInvalidArgument,
       "is longer than 262 bytes"},
  };
  for (const Case& c : cases) {
    std::unique_ptr<Session> session =
        NewSession(cluster, TestCluster::Site(0));
    v1::JoinRequest request = JoinDemo(2, 0);
    request.set_peer_endpoint(c.endpoint);
    const absl::Status joined =
        session->Join(request, absl::Seconds(30), absl::Seconds(10));
    EXPECT_EQ(joined.code(), c.code) << c.endpoint << ": " << joined;
    EXPECT_THAT(joined.message(), ::testing::HasSubstr(c.says)) << c.endpoint;
  }
  // The refused offers left no one waiting: two good joins form the group.
  std::vector<std::unique_ptr<Session>> sessions = JoinAll(cluster, 2);
  EXPECT_FALSE(::testing::Test::HasFailure());
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
