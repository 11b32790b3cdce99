// Every error of the core, end to end over mutual TLS: every rank gets the
// same status, the message names the ranks and values, and the server keeps
// serving the next round.
#include <gmock/gmock.h>
#include <grpcpp/create_channel.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "client/provision.h"
#include "fedgather/v1/fedgather.grpc.pb.h"
#include "tests/e2e/test_cluster.h"

namespace fedgather::testing {
namespace {

using ::testing::HasSubstr;

absl::Status GatherSpec(Group& group, const TensorSpec& spec) {
  std::vector<uint8_t> in_bytes(ByteSize(spec).value(), 1);
  TensorSpec out_spec = spec;
  out_spec.shape.insert(out_spec.shape.begin(), group.world_size());
  std::vector<uint8_t> out_bytes(ByteSize(out_spec).value());
  ConstHostTensor in{spec, in_bytes.data()};
  MutableHostTensor out{out_spec, out_bytes.data()};
  return group.AllGatherInto({&in, 1}, {&out, 1});
}

TEST(MismatchTest, ShapeMismatchFailsEveryRankWithTheSameStatus) {
  TestCluster cluster(ClusterOptions(2));
  Members members(cluster);
  auto statuses = members.Run([&](int i) {
    return GatherSpec(*members.groups[i],
                      {"w", DType::kF32, {i == 0 ? 4 : 5, 3}});
  });
  ExpectSameStatusEverywhere(statuses, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(statuses[0].message()), HasSubstr("tensor 'w'"));
  EXPECT_THAT(std::string(statuses[0].message()), HasSubstr("shape"));
  EXPECT_THAT(std::string(statuses[0].message()),
              HasSubstr("rank 0 (spiffe://fedgather/site-1)"));
  EXPECT_THAT(std::string(statuses[0].message()),
              HasSubstr("rank 1 (spiffe://fedgather/site-2)"));
  members.ExpectNextRoundWorks();
}

TEST(MismatchTest, DtypeAndNameMismatchesNameTheField) {
  TestCluster cluster(ClusterOptions(2));
  Members members(cluster);
  auto dtype = members.Run([&](int i) {
    return GatherSpec(*members.groups[i],
                      {"w", i == 0 ? DType::kF32 : DType::kF16, {2}});
  });
  ExpectSameStatusEverywhere(dtype, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(dtype[0].message()), HasSubstr("dtype"));
  auto name = members.Run([&](int i) {
    return GatherSpec(*members.groups[i],
                      {i == 0 ? "alpha" : "beta", DType::kF32, {2}});
  });
  ExpectSameStatusEverywhere(name, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(name[0].message()), HasSubstr("'alpha'"));
  EXPECT_THAT(std::string(name[0].message()), HasSubstr("'beta'"));
  members.ExpectNextRoundWorks();
}

TEST(MismatchTest, DifferentOpsAreFailedPrecondition) {
  TestCluster cluster(ClusterOptions(2));
  Members members(cluster);
  auto statuses = members.Run([&](int i) -> absl::Status {
    float x[2] = {1, 2};
    ConstHostTensor in{{"x", DType::kF32, {2}}, x};
    if (i == 0) {
      float out[4];
      MutableHostTensor o{{"x", DType::kF32, {2, 2}}, out};
      return members.groups[i]->AllGatherInto({&in, 1}, {&o, 1});
    }
    std::vector<float> parts[2];
    return members.groups[i]->AllGatherV(
        {&in, 1}, [&](int r, int, const TensorSpec&) -> absl::StatusOr<void*> {
          parts[r].resize(2);
          return parts[r].data();
        });
  });
  ExpectSameStatusEverywhere(statuses, absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(statuses[0].message()), HasSubstr("ALL_GATHER_V"));
  EXPECT_THAT(std::string(statuses[0].message()), HasSubstr("different order"));
  members.ExpectNextRoundWorks();
}

TEST(DeadlineTest, ExpiryListsMissingRanksAndEveryRankGetsIt) {
  ClusterOptions options{2};
  options.limits.round_timeout = absl::Seconds(1);
  TestCluster cluster(options);
  Members members(cluster);
  const absl::Status first = GatherRanks(*members.groups[0]);
  EXPECT_EQ(first.code(), absl::StatusCode::kDeadlineExceeded) << first;
  EXPECT_THAT(std::string(first.message()),
              HasSubstr("rank 1 (spiffe://fedgather/site-2): not started"));
  // The late rank gets the round's answer, not a new round.
  const absl::Status late = GatherRanks(*members.groups[1]);
  EXPECT_EQ(late, first);
  members.ExpectNextRoundWorks();
}

TEST(DisconnectTest, MemberLeavingMidRoundFailsOthersPromptly) {
  ClusterOptions options{3};
  options.limits.round_timeout = absl::Seconds(120);
  TestCluster cluster(options);
  Members members(cluster);
  std::vector<absl::Status> statuses(2);
  std::vector<absl::Duration> took(2);
  RunRanks(3, [&](int i) {
    if (i == 2) {
      // Leave once both others are inside the round.
      for (int r = 0; r < 2; ++r) {
        ASSERT_TRUE(cluster.events().WaitFor(
            [r](const server::ServerEvent& e) {
              return e.kind == server::EventKind::kContributionStarted &&
                     e.rank == r;
            },
            absl::Seconds(30)));
      }
      members.groups[2].reset();
      return;
    }
    const absl::Time start = absl::Now();
    statuses[i] = GatherRanks(*members.groups[i]);
    took[i] = absl::Now() - start;
  });
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(statuses[i].code(), absl::StatusCode::kUnavailable)
        << statuses[i];
    EXPECT_THAT(std::string(statuses[i].message()),
                HasSubstr("rank 2 (spiffe://fedgather/site-3)"));
    EXPECT_LT(took[i], absl::Seconds(10));  // far below the 120 s deadline
  }
  // The epoch ended: members join again and the server serves them.
  Members again(cluster);
  again.ExpectNextRoundWorks();
}

TEST(RefusalTest, JoinErrorsNameWhatWasWrong) {
  ClusterOptions options{2};
  options.extra = {"intruder"};
  TestCluster cluster(options);
  auto intruder = cluster.Connect("intruder");
  auto denied = intruder->Join({"demo", 2, std::nullopt, absl::Seconds(10)});
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(denied.status().message()),
              HasSubstr("identity 'spiffe://fedgather/intruder'"));
  // The refusal is reported, with the identity and the reason.
  EXPECT_TRUE(cluster.events().WaitFor(
      [](const server::ServerEvent& e) {
        return e.kind == server::EventKind::kAccessDenied &&
               e.action == "join" &&
               e.identity == "spiffe://fedgather/intruder" &&
               e.status.code() == absl::StatusCode::kPermissionDenied;
      },
      absl::Seconds(10)));
  // An unknown group gets the same answer, so it reveals nothing.
  auto member = cluster.Connect(TestCluster::Site(0));
  auto unknown = member->Join({"nope", 2, std::nullopt, absl::Seconds(10)});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(unknown.status().message()),
              HasSubstr("no such group, or"));
  auto world = member->Join({"demo", 3, std::nullopt, absl::Seconds(10)});
  EXPECT_EQ(world.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(world.status().message()), HasSubstr("world size 2"));

  // site-1 waits at rank 0; site-2 asking for rank 0 is refused, then joins.
  absl::StatusOr<std::unique_ptr<Group>> first;
  std::thread waiter([&] {
    first = member->Join({"demo", 2, 0, absl::Seconds(30)});
  });
  ASSERT_TRUE(cluster.events().WaitFor(
      [](const server::ServerEvent& e) {
        return e.kind == server::EventKind::kMemberJoined;
      },
      absl::Seconds(30)));
  auto second_client = cluster.Connect(TestCluster::Site(1));
  auto taken = second_client->Join({"demo", 2, 0, absl::Seconds(10)});
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(taken.status().message()),
              HasSubstr("taken by 'spiffe://fedgather/site-1'"));
  auto second = second_client->Join({"demo", 2, 1, absl::Seconds(30)});
  waiter.join();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  std::vector<absl::Status> statuses(2);
  std::thread a([&] { statuses[0] = GatherRanks(**first); });
  statuses[1] = GatherRanks(**second);
  a.join();
  EXPECT_TRUE(statuses[0].ok()) << statuses[0];
  EXPECT_TRUE(statuses[1].ok()) << statuses[1];
}

TEST(InputTest, EmptyInputIsRefusedLocallyAndSpendsNoSeq) {
  TestCluster cluster(ClusterOptions(2));
  Members members(cluster);
  const absl::Status empty = members.groups[0]->AllGatherInto({}, {});
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument) << empty;
  members.ExpectNextRoundWorks();
}

// Drives a raw Collective stream as `site`, to send what our client never
// would.
class RawCollective {
 public:
  RawCollective(const TestCluster& cluster, const std::string& site) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel_ = grpc::CreateCustomChannel(
        cluster.address(), MakeChannelCredentials(cluster.TlsFor(site)), args);
    stub_ = v1::Rendezvous::NewStub(channel_);
    stream_ = stub_->Collective(&context_);
  }
  void Send(const v1::CollectiveFrame& frame) { stream_->Write(frame); }
  grpc::Status Finish() {
    stream_->WritesDone();
    v1::CollectiveFrame ignored;
    while (stream_->Read(&ignored)) {
    }
    return stream_->Finish();
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::CollectiveFrame, v1::CollectiveFrame>>
      stream_;
};

v1::CollectiveFrame Header(const Group& group, int rank, uint64_t seq) {
  v1::CollectiveFrame frame;
  v1::CollectiveHeader* h = frame.mutable_header();
  h->set_group("demo");
  h->set_epoch(group.epoch());
  h->set_seq(seq);
  h->set_op(v1::ALL_GATHER);
  h->set_rank(rank);
  h->set_digest_algorithm(group.digest_algorithm() == DigestAlgorithm::kSha256
                              ? v1::DIGEST_SHA256
                              : v1::DIGEST_BLAKE3);
  v1::TensorSpec* spec = h->add_tensors();
  spec->set_name("r");
  spec->set_dtype(v1::I32);
  spec->add_shape(1);
  return frame;
}

TEST(ProtocolTest, ChunkPastDeclaredSizeFailsTheRoundEverywhere) {
  TestCluster cluster(ClusterOptions(2));
  Members members(cluster);
  RawCollective raw(cluster, TestCluster::Site(1));
  raw.Send(Header(*members.groups[1], 1, 0));
  v1::CollectiveFrame chunk;
  chunk.mutable_chunk()->set_rank(1);
  chunk.mutable_chunk()->set_data(std::string(8, 'x'));  // declared 4 bytes
  raw.Send(chunk);
  const absl::Status honest = GatherRanks(*members.groups[0]);
  const grpc::Status raw_status = raw.Finish();
  EXPECT_EQ(honest.code(), absl::StatusCode::kInvalidArgument) << honest;
  EXPECT_THAT(std::string(honest.message()),
              HasSubstr("past its declared size of 4 bytes"));
  EXPECT_THAT(std::string(honest.message()),
              HasSubstr("rank 1 (spiffe://fedgather/site-2)"));
  EXPECT_EQ(raw_status.error_message(), std::string(honest.message()));
}

TEST(ProtocolTest, ChunkBeforeHeaderIsInvalidArgument) {
  TestCluster cluster(ClusterOptions(2));
  Members members(cluster);
  RawCollective raw(cluster, TestCluster::Site(1));
  v1::CollectiveFrame chunk;
  chunk.mutable_chunk()->set_data("x");
  raw.Send(chunk);
  const grpc::Status status = raw.Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("chunk"));
}

TEST(ProtocolTest, ActingAsAnotherRankIsPermissionDenied) {
  TestCluster cluster(ClusterOptions(2));
  Members members(cluster);
  RawCollective raw(cluster, TestCluster::Site(1));
  raw.Send(Header(*members.groups[1], 0, 0));  // site-2 holds rank 1
  const grpc::Status status = raw.Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), HasSubstr("may not act as rank 0"));
  EXPECT_TRUE(cluster.events().WaitFor(
      [](const server::ServerEvent& e) {
        return e.kind == server::EventKind::kCollectiveRefused &&
               e.identity == "spiffe://fedgather/site-2";
      },
      absl::Seconds(10)));
}

TEST(ProtocolTest, SeqOutOfOrderEndsTheEpochForEveryone) {
  TestCluster cluster(ClusterOptions(2));
  Members members(cluster);
  RawCollective raw(cluster, TestCluster::Site(1));
  raw.Send(Header(*members.groups[1], 1, 5));
  const grpc::Status raw_status = raw.Finish();
  EXPECT_EQ(raw_status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(raw_status.error_message(),
              HasSubstr("sent seq 5 but its next collective is seq 0"));
  const absl::Status honest = GatherRanks(*members.groups[0]);
  EXPECT_EQ(honest.code(), absl::StatusCode::kFailedPrecondition) << honest;
  EXPECT_EQ(std::string(honest.message()), raw_status.error_message());
  members.groups.clear();
  Members again(cluster);
  again.ExpectNextRoundWorks();
}

}  // namespace
}  // namespace fedgather::testing
