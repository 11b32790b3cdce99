// The direct data plane end to end (docs/protocol.md, "Data planes"):
// members that offer peer endpoints form a direct epoch, make their ring
// links as it forms, and gather over them while the server takes only
// headers, claims, deliveries and the commit. Real mutual TLS on
// 127.0.0.1, certificates from our own provisioning.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/peer/peer_dial.h"
#include "client/peer/peer_listener.h"
#include "client/peer/peer_socket.h"
#include "client/peer/peer_tls.h"
#include "common/data_plane_name.h"
#include "common/status_macros.h"
#include "tests/e2e/metrics_scrape.h"
#include "tests/e2e/tcp_proxy.h"
#include "tests/e2e/test_cluster.h"

namespace fedgather::testing {
namespace {

using ::testing::HasSubstr;

// What rank r contributes in round `round`: two tensors of different
// dtypes and sizes, each rank's bytes its own.
struct Contribution {
  std::vector<uint8_t> weights;  // F32 [rows, 3]
  std::vector<uint8_t> counts;   // I64 [5]
  int64_t rows;
  Contribution(int rank, int round, int64_t rows_per_rank)
      : weights(RandomBytes(rows_per_rank * 3 * 4, 1000 * round + rank)),
        counts(RandomBytes(5 * 8, 5000 * round + rank)),
        rows(rows_per_rank) {}
};

// AllGatherEveryRank gathers every rank's Contribution of `round` on the
// group and checks every byte of the result against what each rank sent.
absl::Status AllGatherEveryRank(Group& group, int round, int64_t rows,
                                const CollectiveOptions& options = {}) {
  const int n = group.world_size();
  const Contribution mine(group.rank(), round, rows);
  const std::vector<ConstHostTensor> inputs = {
      {{"w", DType::kF32, {rows, 3}}, mine.weights.data()},
      {{"n", DType::kI64, {5}}, mine.counts.data()}};
  std::vector<uint8_t> weights(n * mine.weights.size());
  std::vector<uint8_t> counts(n * mine.counts.size());
  const std::vector<MutableHostTensor> outputs = {
      {{"w", DType::kF32, {n, rows, 3}}, weights.data()},
      {{"n", DType::kI64, {n, 5}}, counts.data()}};
  FG_RETURN_IF_ERROR(group.AllGatherInto(inputs, outputs, options));
  for (int r = 0; r < n; ++r) {
    const Contribution theirs(r, round, rows);
    if (std::memcmp(weights.data() + r * theirs.weights.size(),
                    theirs.weights.data(), theirs.weights.size()) != 0 ||
        std::memcmp(counts.data() + r * theirs.counts.size(),
                    theirs.counts.data(), theirs.counts.size()) != 0) {
      return absl::InternalError(
          absl::StrCat("rank ", group.rank(), ": rank ", r, "'s part differs"));
    }
  }
  return absl::OkStatus();
}

// The elements of AllReduceEveryRank's tensors: 128 KiB of I64 and
// 128 KiB of F32 go round the ring; 1 KiB of each goes in log steps
// (client/peer/op_algorithm.h).
constexpr int64_t kRingReduceElements = 128 * 1024 / 8;
constexpr int64_t kLogStepReduceElements = 1024 / 8;

// AllReduceEveryRank all_reduces (in place) an I64 tensor of every rank's
// own values with SUM and an F32 tensor with MEAN (kElements and
// 2·kElements elements), checks the sum exactly and the mean against an
// fp64 one, and returns the mean's bytes.
absl::Status AllReduceEveryRank(Group& group, std::vector<float>* mean,
                                const CollectiveOptions& options = {},
                                int64_t kElements = kRingReduceElements) {
  const int n = group.world_size();
  auto value = [](int rank, int64_t e) {
    return static_cast<int64_t>((e * 2654435761u + rank * 40503u) % 100000) -
           50000;
  };
  std::vector<int64_t> counts(kElements);
  mean->resize(2 * kElements);
  for (int64_t e = 0; e < kElements; ++e) counts[e] = value(group.rank(), e);
  for (int64_t e = 0; e < 2 * kElements; ++e) {
    (*mean)[e] = static_cast<float>(value(group.rank(), e)) / 1024.0f;
  }
  const MutableHostTensor sum{{"n", DType::kI64, {kElements}}, counts.data()};
  const MutableHostTensor average{{"w", DType::kF32, {2 * kElements}},
                                  mean->data()};
  const ConstHostTensor sum_in{sum.spec, counts.data()};
  const ConstHostTensor average_in{average.spec, mean->data()};
  FG_RETURN_IF_ERROR(
      group.AllReduce({&sum_in, 1}, {&sum, 1}, v1::SUM, 1, options));
  FG_RETURN_IF_ERROR(
      group.AllReduce({&average_in, 1}, {&average, 1}, v1::MEAN, 1, options));
  for (int64_t e = 0; e < 2 * kElements; ++e) {
    double expected = 0;
    for (int r = 0; r < n; ++r) expected += value(r, e) / 1024.0;
    expected /= n;
    if (e < kElements) {
      int64_t total = 0;
      for (int r = 0; r < n; ++r) total += value(r, e);
      if (counts[e] != total) {
        return absl::InternalError(absl::StrCat("sum element ", e, " is ",
                                                counts[e], ", not ", total));
      }
    }
    if (std::abs((*mean)[e] - expected) > 1e-5 * (1 + std::abs(expected))) {
      return absl::InternalError(absl::StrCat("mean element ", e, " is ",
                                              (*mean)[e], ", not ", expected));
    }
  }
  return absl::OkStatus();
}

class DirectPlaneTest : public ::testing::TestWithParam<int> {};

TEST_P(DirectPlaneTest, EveryOpIsExactAndTheServerSeesNoPayload) {
  const int n = GetParam();
  ClusterOptions options(n);
  options.metrics = true;
  TestCluster cluster(options);
  TcpProxy proxy(cluster.server().port());
  OfferingMembers members(cluster, proxy.address());
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (const auto& group : members.groups) {
    EXPECT_EQ(group->data_plane(), v1::DATA_PLANE_DIRECT);
    EXPECT_THAT(group->data_plane_reason(),
                HasSubstr("every member offered a peer endpoint"));
  }
  const int64_t before = proxy.upstream_bytes() + proxy.downstream_bytes();

  // ALL_GATHER: 256 KiB of weights per rank, in several ring chunks and
  // several handed-over frames.
  constexpr int64_t kRows = 256 * 1024 / 12;
  for (const absl::Status& s : members.Run([&](int r) {
         return AllGatherEveryRank(*members.groups[r], 1, kRows);
       })) {
    EXPECT_TRUE(s.ok()) << s;
  }
  // ALL_GATHER_BYTES, parts of different sizes (one empty).
  for (const absl::Status& s : members.Run([&](int r) -> absl::Status {
         const std::vector<uint8_t> bytes = RandomBytes(r * 7000, 77 + r);
         FG_ASSIGN_OR_RETURN(std::vector<std::string> gathered,
                             members.groups[r]->AllGatherBytes(
                                 std::string(bytes.begin(), bytes.end())));
         for (int q = 0; q < n; ++q) {
           const std::vector<uint8_t> theirs = RandomBytes(q * 7000, 77 + q);
           if (gathered[q] != std::string(theirs.begin(), theirs.end())) {
             return absl::InternalError(absl::StrCat("part ", q, " differs"));
           }
         }
         return absl::OkStatus();
       })) {
    EXPECT_TRUE(s.ok()) << s;
  }
  // BROADCAST of 256 KiB from the last rank: a chain from the root.
  for (const absl::Status& s : members.Run([&](int r) -> absl::Status {
         const std::vector<uint8_t> sent = RandomBytes(256 * 1024, 91);
         std::vector<uint8_t> got =
             r == n - 1 ? sent : std::vector<uint8_t>(sent.size(), 0);
         const MutableHostTensor t{
             {"b", DType::kU8, {static_cast<int64_t>(got.size())}}, got.data()};
         FG_RETURN_IF_ERROR(members.groups[r]->Broadcast({&t, 1}, n - 1));
         return got == sent ? absl::OkStatus()
                            : absl::InternalError("the broadcast differs");
       })) {
    EXPECT_TRUE(s.ok()) << s;
  }
  // ALL_REDUCE of 256 KiB: integer sums exact, floating means within
  // fp32 rounding and the same bytes on every rank.
  std::vector<std::vector<float>> means(n);
  for (const absl::Status& s : members.Run([&](int r) {
         return AllReduceEveryRank(*members.groups[r], &means[r]);
       })) {
    EXPECT_TRUE(s.ok()) << s;
  }
  for (int r = 1; r < n; ++r) EXPECT_TRUE(means[r] == means[0]) << r;

  // The same ops with small parts, which go in log steps over every link
  // (client/peer/op_algorithm.h): an all_gather of 1.2 KiB per rank, a
  // broadcast of 3 KiB from rank 0, an all_reduce of 1 KiB per tensor.
  for (const absl::Status& s : members.Run([&](int r) {
         return AllGatherEveryRank(*members.groups[r], 3, 100);
       })) {
    EXPECT_TRUE(s.ok()) << s;
  }
  for (const absl::Status& s : members.Run([&](int r) -> absl::Status {
         const std::vector<uint8_t> sent = RandomBytes(3000, 92);
         std::vector<uint8_t> got =
             r == 0 ? sent : std::vector<uint8_t>(sent.size(), 0);
         const MutableHostTensor t{
             {"b", DType::kU8, {static_cast<int64_t>(got.size())}}, got.data()};
         FG_RETURN_IF_ERROR(members.groups[r]->Broadcast({&t, 1}, 0));
         return got == sent ? absl::OkStatus()
                            : absl::InternalError("the broadcast differs");
       })) {
    EXPECT_TRUE(s.ok()) << s;
  }
  std::vector<std::vector<float>> small_means(n);
  for (const absl::Status& s : members.Run([&](int r) {
         return AllReduceEveryRank(*members.groups[r], &small_means[r], {},
                                   kLogStepReduceElements);
       })) {
    EXPECT_TRUE(s.ok()) << s;
  }
  for (int r = 1; r < n; ++r) {
    EXPECT_TRUE(small_means[r] == small_means[0]) << r;
  }

  // The server carried headers, claims, deliveries and commits only. On
  // the relay each rank's 256 KiB per op would have gone up to it (and
  // (N−1) times that back down to each rank, for a gather).
  const int64_t carried =
      proxy.upstream_bytes() + proxy.downstream_bytes() - before;
  // Each rank's stream carries O(N) small frames per op (the others'
  // headers, the claims, the commit): about 1.5 KiB·N² for the first five
  // ops in all, against at least 5·N·256 KiB of payload on the relay, and
  // as much again for the four small ones.
  EXPECT_LT(carried, 2 * (2048 * n * n + 8192))
      << "the server carried " << carried << " bytes";

  // The status names the plane, and the epoch stays direct.
  auto status = members.clients[0]->GetStatus("demo");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->groups(0).data_plane(), v1::DATA_PLANE_DIRECT);
  const std::string metrics = Scrape(cluster.server().metrics_port());
  EXPECT_EQ(
      MetricValue(metrics,
                  "fedgather_data_plane{group=\"demo\",plane=\"direct\"}"),
      1);
  EXPECT_EQ(MetricValue(metrics,
                        "fedgather_data_plane{group=\"demo\",plane=\"relay\"}"),
            0);
  // Per member: what it reported its peer links moved. Every byte sent
  // was received; every member's ring link carried at least the
  // all_gather's (N−1) parts of 256 KiB.
  const auto& reported = status->groups(0).members();
  ASSERT_EQ(reported.size(), n);
  uint64_t sent = 0;
  uint64_t received = 0;
  for (const v1::Member& member : reported) {
    sent += member.peer_link_bytes_sent();
    received += member.peer_link_bytes_received();
  }
  EXPECT_EQ(sent, received);
  for (int r = 0; r < n; ++r) {
    const v1::Member& member = reported[r];
    EXPECT_GE(member.peer_link_bytes_sent(),
              static_cast<uint64_t>((n - 1) * kRows * 12));
    if (n == 1) {
      EXPECT_EQ(member.peer_link_bytes_sent(), 0u);
    }
    EXPECT_EQ(
        MetricValue(metrics, absl::StrCat("fedgather_peer_link_bytes{group="
                                          "\"demo\",rank=\"",
                                          r, "\",direction=\"sent\"}")),
        static_cast<double>(member.peer_link_bytes_sent()));
  }
  for (const absl::Status& s : members.Run([&](int r) {
         return AllGatherEveryRank(*members.groups[r], 2, 10);
       })) {
    EXPECT_TRUE(s.ok()) << s;
  }
  for (const auto& group : members.groups) {
    EXPECT_EQ(group->data_plane(), v1::DATA_PLANE_DIRECT);
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, DirectPlaneTest,
                         ::testing::Values(1, 2, 3, 4, 8));

// A hostile forwarder, rank 1, on the ring (N = 3, 1.2 MB parts: it
// forwards part 0 to rank 2) and in log steps (N = 4, 12 KB parts: it
// forwards part 0 to rank 3 at step 1). `reporter` is the rank that
// receives part 0 from it.
struct ForwarderCase {
  int world;
  int64_t rows;
  int reporter;
};
const ForwarderCase kOnTheRing{3, 100000, 2};
const ForwarderCase kInLogSteps{4, 1000, 3};

class FlippedByteTest : public ::testing::TestWithParam<ForwarderCase> {};

TEST_P(FlippedByteTest, FailsEveryRankNamingPartAndLink) {
  const ForwarderCase c = GetParam();
  TestCluster cluster(ClusterOptions(c.world));
  OfferingMembers members(cluster, cluster.address());
  ASSERT_FALSE(::testing::Test::HasFailure());
  CollectiveOptions hostile;
  hostile.direct_forward_hook = [](int part, char* data, size_t size) {
    if (part == 0 && size > 0) data[size / 2] ^= 0x01;
  };
  const std::vector<absl::Status> statuses = members.Run([&](int r) {
    return AllGatherEveryRank(*members.groups[r], 1, c.rows,
                              r == 1 ? hostile : CollectiveOptions());
  });
  ExpectSameStatusEverywhere(statuses, absl::StatusCode::kDataLoss);
  const std::string message(statuses[0].message());
  EXPECT_THAT(message, HasSubstr(absl::StrCat("rank ", c.reporter,
                                              " (spiffe://fedgather/site-",
                                              c.reporter + 1, ") reports")));
  EXPECT_THAT(message,
              HasSubstr("rank 0 ('spiffe://fedgather/site-1'): its part"));
  EXPECT_THAT(message, HasSubstr("arrived on the link from rank 1"));
  // Every member and the server fell back to the relay; the next round
  // works there.
  for (const auto& group : members.groups) {
    EXPECT_EQ(group->data_plane(), v1::DATA_PLANE_RELAY);
    EXPECT_THAT(group->data_plane_reason(), HasSubstr("fell back"));
  }
  for (const absl::Status& s : members.Run([&](int r) {
         return AllGatherEveryRank(*members.groups[r], 2, 1000);
       })) {
    EXPECT_TRUE(s.ok()) << s;
  }
  auto status = members.clients[0]->GetStatus("demo");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->groups(0).data_plane(), v1::DATA_PLANE_RELAY);
  EXPECT_THAT(status->groups(0).data_plane_reason(),
              HasSubstr("fell back to the relay after seq 0 failed"));
}

INSTANTIATE_TEST_SUITE_P(RingAndLogSteps, FlippedByteTest,
                         ::testing::Values(kOnTheRing, kInLogSteps));

TEST(DirectPlaneFaultTest,
     ASmallAllReduceForwarderThatChangesAContributionIsNamed) {
  // In log steps the contributions travel whole and each is checked
  // against its rank's claim: rank 1 forwards rank 0's to rank 3 (N = 4).
  TestCluster cluster(ClusterOptions(4));
  OfferingMembers members(cluster, cluster.address());
  ASSERT_FALSE(::testing::Test::HasFailure());
  CollectiveOptions hostile;
  hostile.direct_forward_hook = [](int part, char* data, size_t size) {
    if (part == 0 && size > 0) data[0] ^= 0x01;
  };
  const std::vector<absl::Status> statuses = members.Run([&](int r) {
    std::vector<float> mean;
    return AllReduceEveryRank(*members.groups[r], &mean,
                              r == 1 ? hostile : CollectiveOptions(),
                              kLogStepReduceElements);
  });
  ExpectSameStatusEverywhere(statuses, absl::StatusCode::kDataLoss);
  const std::string message(statuses[0].message());
  EXPECT_THAT(message, HasSubstr("rank 3 (spiffe://fedgather/site-4) reports"));
  EXPECT_THAT(message,
              HasSubstr("rank 0 ('spiffe://fedgather/site-1'): its part"));
  EXPECT_THAT(message, HasSubstr("arrived on the link from rank 1"));
  for (const absl::Status& s : members.Run([&](int r) {
         std::vector<float> mean;
         return AllReduceEveryRank(*members.groups[r], &mean, {},
                                   kLogStepReduceElements);
       })) {
    EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(DirectPlaneFaultTest,
     AnAllReduceForwarderThatChangesASegmentFailsEveryRankWithDataLoss) {
  TestCluster cluster(ClusterOptions(3));
  OfferingMembers members(cluster, cluster.address());
  ASSERT_FALSE(::testing::Test::HasFailure());
  // Rank 1 flips a bit of everything it forwards; in the all_gather the
  // reduced segment 0 reaches rank 2 only through it, so ranks 0 and 2
  // end with different results, which the server sees in their Deliveries.
  CollectiveOptions hostile;
  hostile.direct_forward_hook = [](int, char* data, size_t size) {
    if (size > 0) data[0] ^= 0x01;
  };
  const std::vector<absl::Status> statuses = members.Run([&](int r) {
    std::vector<float> mean;
    return AllReduceEveryRank(*members.groups[r], &mean,
                              r == 1 ? hostile : CollectiveOptions());
  });
  ExpectSameStatusEverywhere(statuses, absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(statuses[0].message()),
              HasSubstr("the ranks' results differ"));
  for (const auto& group : members.groups) {
    EXPECT_EQ(group->data_plane(), v1::DATA_PLANE_RELAY);
  }
  for (const absl::Status& s : members.Run([&](int r) {
         std::vector<float> mean;
         return AllReduceEveryRank(*members.groups[r], &mean);
       })) {
    EXPECT_TRUE(s.ok()) << s;
  }
}

// FreeLoopbackPort is a port of 127.0.0.1 that was free a moment ago
// (bound, read, closed), for a listener the test must know the port of
// before it starts.
int FreeLoopbackPort() {
  absl::StatusOr<PeerSocket> socket = ListenTcp("127.0.0.1:0");
  EXPECT_TRUE(socket.ok()) << socket.status();
  if (!socket.ok()) return 0;
  absl::StatusOr<int> port = BoundPort(*socket);
  EXPECT_TRUE(port.ok()) << port.status();
  return port.value_or(0);
}

TEST(DirectPlaneFaultTest, ALinkCutMidRingFailsEveryRankWithOneStatus) {
  TestCluster cluster(ClusterOptions(3));
  // Rank 0's link to rank 1 goes through a proxy: rank 1 listens on a
  // known port and advertises the proxy in front of it.
  const int port = FreeLoopbackPort();
  TcpProxy link(port);
  OfferingMembers members(cluster, cluster.address(),
                          [&](int r, JoinOptions& o) {
                            if (r != 1) return;
                            o.peer_listen = absl::StrCat("127.0.0.1:", port);
                            o.peer_advertise = link.address();
                          });
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (const auto& group : members.groups) {
    ASSERT_EQ(group->data_plane(), v1::DATA_PLANE_DIRECT);
  }
  // 16 MiB parts; the link breaks 4 MiB into rank 0's own part.
  constexpr int64_t kRows = 16 * 1024 * 1024 / 12;
  link.CutAfterUpstreamBytes(4 << 20);
  const absl::Time start = absl::Now();
  const std::vector<absl::Status> statuses = members.Run(
      [&](int r) { return AllGatherEveryRank(*members.groups[r], 1, kRows); });
  // A broken link fails at once; a stalled one would take the stall time.
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_EQ(link.cuts(), 1);
  ExpectSameStatusEverywhere(statuses, absl::StatusCode::kUnavailable);
  const std::string message(statuses[0].message());
  // The first failure to reach the server names the link it came from:
  // the cut one, or one a neighbour of the cut aborted after it (rank 1
  // breaks its link to rank 2 once its link from rank 0 fails; 2 of 20
  // runs reported that one).
  EXPECT_THAT(message, HasSubstr("reports: the link "));
  // Every member and the server fell back to the relay; the next round
  // works there.
  for (const auto& group : members.groups) {
    EXPECT_EQ(group->data_plane(), v1::DATA_PLANE_RELAY);
  }
  for (const absl::Status& s : members.Run([&](int r) {
         return AllGatherEveryRank(*members.groups[r], 2, 1000);
       })) {
    EXPECT_TRUE(s.ok()) << s;
  }
}

class HungForwarderTest : public ::testing::TestWithParam<ForwarderCase> {};

TEST_P(HungForwarderTest, FailsEveryRankWithOneStatus) {
  const ForwarderCase c = GetParam();
  TestCluster cluster(ClusterOptions(c.world));
  OfferingMembers members(cluster, cluster.address());
  ASSERT_FALSE(::testing::Test::HasFailure());
  // Rank 1 hangs past the stall timeout (5 s) before it forwards.
  CollectiveOptions hung;
  hung.direct_forward_hook = [](int, char*, size_t) {
    absl::SleepFor(absl::Seconds(7));
  };
  const absl::Time start = absl::Now();
  const std::vector<absl::Status> statuses = members.Run([&](int r) {
    return AllGatherEveryRank(*members.groups[r], 1, c.rows,
                              r == 1 ? hung : CollectiveOptions());
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  ASSERT_FALSE(statuses[0].ok());
  for (const absl::Status& s : statuses) EXPECT_EQ(s, statuses[0]);
  const std::string message(statuses[0].message());
  EXPECT_THAT(message, HasSubstr("reports"));
  EXPECT_THAT(message, HasSubstr("link"));
  for (const absl::Status& s : members.Run([&](int r) {
         return AllGatherEveryRank(*members.groups[r], 2, 1000);
       })) {
    EXPECT_TRUE(s.ok()) << s;
  }
}

INSTANTIATE_TEST_SUITE_P(RingAndLogSteps, HungForwarderTest,
                         ::testing::Values(kOnTheRing, kInLogSteps));

// AuditAfterLeaving has the members leave and stops the server, which
// closes its audit log (written by a thread of its own), then reads it.
std::vector<nlohmann::json> AuditAfterLeaving(OfferingMembers& members,
                                              TestCluster& cluster) {
  members.groups.clear();
  cluster.StopServer();
  return ReadAuditRecords(cluster.audit_path());
}

TEST(DirectPlaneChoiceTest, AutoRunsOnTheRelayWhenAMemberOffersNoEndpoint) {
  ClusterOptions options(3);
  options.audit = true;
  TestCluster cluster(options);
  OfferingMembers members(cluster, cluster.address(),
                          [](int r, JoinOptions& o) {
                            if (r == 2) o.peer_listen.clear();
                          });
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (const auto& group : members.groups) {
    EXPECT_EQ(group->data_plane(), v1::DATA_PLANE_RELAY);
    EXPECT_EQ(group->data_plane_reason(),
              "rank 2 (spiffe://fedgather/site-3) offered no peer endpoint");
  }
  for (const absl::Status& s : members.Run([&](int r) {
         return AllGatherEveryRank(*members.groups[r], 1, 100);
       })) {
    EXPECT_TRUE(s.ok()) << s;
  }
  // The epoch's audit record says which plane and why.
  bool found = false;
  for (const nlohmann::json& record : AuditAfterLeaving(members, cluster)) {
    if (!record.contains("details")) continue;
    const std::string details = record["details"].dump();
    if (details.find("data_plane_reason") == std::string::npos) continue;
    found = true;
    EXPECT_THAT(details, HasSubstr("relay"));
    EXPECT_THAT(details, HasSubstr("offered no peer endpoint"));
  }
  EXPECT_TRUE(found);
}

// ExpectRelayEverywhere expects every member on the relay with a reason
// that holds `says`, and a round that works there.
void ExpectRelayEverywhere(OfferingMembers& members, const std::string& says) {
  for (const auto& group : members.groups) {
    ASSERT_NE(group, nullptr);
    EXPECT_EQ(group->data_plane(), v1::DATA_PLANE_RELAY);
    EXPECT_THAT(group->data_plane_reason(), HasSubstr(says));
  }
  for (const absl::Status& s : members.Run([&](int r) {
         return AllGatherEveryRank(*members.groups[r], 1, 100);
       })) {
    EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(DirectPlaneChoiceTest, AutoRunsOnTheRelayWhenALinkCannotConnect) {
  TestCluster cluster(ClusterOptions(3));
  // Rank 2 advertises a port nothing listens on: rank 1 cannot dial it.
  absl::StatusOr<PeerSocket> closed = ListenTcp("127.0.0.1:0");
  ASSERT_TRUE(closed.ok());
  const int closed_port = BoundPort(*closed).value();
  *closed = PeerSocket();
  OfferingMembers members(
      cluster, cluster.address(), [&](int r, JoinOptions& o) {
        if (r == 2) o.peer_advertise = absl::StrCat("127.0.0.1:", closed_port);
      });
  ExpectRelayEverywhere(members, "could not make its peer links");
}

TEST(DirectPlaneChoiceTest,
     ALinkToAnImpostorIsRefusedAuditedAndTheEpochRelays) {
  ClusterOptions options(2);
  options.extra = {"intruder"};
  options.audit = true;
  TestCluster cluster(options);
  // An outsider with a valid federation certificate listens where rank 1
  // advertises: rank 0's dial must find it is not site-2 and refuse it.
  auto intruder_tls = PeerTls::Create(cluster.TlsFor("intruder"));
  ASSERT_TRUE(intruder_tls.ok()) << intruder_tls.status();
  absl::StatusOr<PeerSocket> socket = ListenTcp("127.0.0.1:0");
  ASSERT_TRUE(socket.ok());
  const int intruder_port = BoundPort(*socket).value();
  auto intruder = PeerListener::Start(*intruder_tls, *std::move(socket),
                                      PeerListenerOptions());
  ASSERT_TRUE(intruder.ok()) << intruder.status();
  OfferingMembers members(
      cluster, cluster.address(), [&](int r, JoinOptions& o) {
        if (r == 1)
          o.peer_advertise = absl::StrCat("127.0.0.1:", intruder_port);
      });
  ExpectRelayEverywhere(members, "UNAUTHENTICATED");
  // The refused link is a denial in the audit log, naming the reporter.
  bool denied = false;
  for (const nlohmann::json& record : AuditAfterLeaving(members, cluster)) {
    if (record.value("action", "") != "peer_link") continue;
    denied = true;
    EXPECT_EQ(record.value("outcome", ""), "UNAUTHENTICATED");
    EXPECT_THAT(record.value("reason", ""), HasSubstr("intruder"));
  }
  EXPECT_TRUE(denied);
}

TEST(DirectPlaneChoiceTest, AListenersRefusalOfAnImpersonatorIsAudited) {
  TestCluster cluster(ClusterOptions(3));
  OfferingMembers members(cluster, cluster.address());
  ASSERT_FALSE(::testing::Test::HasFailure());
  // site-3 (rank 2), with its own certificate, dials rank 0 as if it were
  // rank 1: rank 0's listener refuses it and reports it to the server.
  const Group& target = *members.groups[0];
  auto tls = PeerTls::Create(cluster.TlsFor("site-3"));
  ASSERT_TRUE(tls.ok()) << tls.status();
  v1::PeerLinkHello hello;
  hello.set_group("demo");
  hello.set_epoch(target.epoch());
  hello.set_from_rank(1);
  hello.set_to_rank(0);
  auto dialed =
      DialPeerLink(**tls, target.peer_endpoints()[0], hello,
                   target.identities()[0], absl::Now() + absl::Seconds(20));
  ASSERT_FALSE(dialed.ok());
  EXPECT_EQ(dialed.status().code(), absl::StatusCode::kPermissionDenied)
      << dialed.status();
  EXPECT_TRUE(cluster.events().WaitFor(
      [](const server::ServerEvent& e) {
        return e.kind == server::EventKind::kAccessDenied &&
               e.action == "peer_link" && e.rank == 0 &&
               e.status.code() == absl::StatusCode::kPermissionDenied &&
               absl::StrContains(e.status.message(), "site-3");
      },
      absl::Seconds(20)));
  // The epoch is untouched: the next gather still goes peer to peer.
  for (const absl::Status& s : members.Run([&](int r) {
         return AllGatherEveryRank(*members.groups[r], 1, 100);
       })) {
    EXPECT_TRUE(s.ok()) << s;
  }
  for (const auto& group : members.groups) {
    EXPECT_EQ(group->data_plane(), v1::DATA_PLANE_DIRECT);
  }
}

TEST(DirectPlaneChoiceTest, PolicyDirectRefusesAJoinWithoutAnEndpoint) {
  ClusterOptions options(2);
  options.group_extra = "    data_plane: direct\n";
  TestCluster cluster(options);
  std::unique_ptr<Client> client = cluster.Connect(TestCluster::Site(0));
  JoinOptions join{"demo", 2, 0, absl::Seconds(5)};
  absl::StatusOr<std::unique_ptr<Group>> group = client->Join(join);
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(group.status().message(), HasSubstr("--peer-listen"));
}

TEST(DirectPlaneChoiceTest, PolicyRelayKeepsOfferingMembersOnTheRelay) {
  ClusterOptions options(2);
  options.group_extra = "    data_plane: relay\n";
  TestCluster cluster(options);
  OfferingMembers members(cluster, cluster.address());
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (const auto& group : members.groups) {
    EXPECT_EQ(group->data_plane(), v1::DATA_PLANE_RELAY);
    EXPECT_EQ(group->data_plane_reason(),
              "the group's policy sets data_plane: relay");
  }
}

}  // namespace
}  // namespace fedgather::testing
