#include "server/membership/group_state.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/content_hasher.h"
#include "common/fingerprint.h"
#include "common/frame_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/events/event_sink.h"
#include "server/events/pending_callbacks.h"
#include "server/relay/round.h"
#include "tests/server/events/recording_events.h"

namespace fedgather::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class FakeSession : public SessionStream {
 public:
  void SendDataPlane(const v1::DataPlaneChosen&) override {}
  void SendJoined(const v1::Joined& message) override {
    joined.push_back(message);
  }
  void Close(const absl::Status& status) override { closes.push_back(status); }
  std::vector<v1::Joined> joined;
  std::vector<absl::Status> closes;
};

const absl::Time kT0 = absl::FromUnixSeconds(1000);

absl::Time At(int64_t seconds_after_t0) {
  return kT0 + absl::Seconds(seconds_after_t0);
}

class GroupStateTest : public ::testing::Test {
 protected:
  // `members` are the allowed identities; the world size is 3.
  void MakeGroup(std::vector<std::string> members = {"site-c", "site-a",
                                                     "site-b"}) {
    GroupConfig config;
    config.name = "demo";
    config.world_size = 3;
    config.members = std::move(members);
    config.max_rounds_in_flight = max_rounds_in_flight_;
    GroupLimits limits;
    limits.join_timeout = absl::Seconds(60);
    limits.round_timeout = absl::Seconds(30);
    limits.heartbeat_interval = absl::Seconds(1);
    limits.heartbeat_timeout = absl::Seconds(5);
    limits.max_chunk_bytes = 1024;
    limits.resume_grace = resume_grace_;
    limits.admission = [this] { return admission_; };
    limits.events = &events_;
    group_ = std::make_unique<GroupState>(std::move(config), limits);
  }

  std::shared_ptr<FakeSession> Session(const std::string& identity) {
    std::shared_ptr<FakeSession>& session = sessions_[identity];
    if (session == nullptr) session = std::make_shared<FakeSession>();
    return session;
  }

  absl::Status Join(const std::string& identity, absl::Time now = kT0,
                    std::optional<uint32_t> rank = std::nullopt,
                    uint32_t world_size = 3) {
    v1::JoinRequest request;
    request.set_group("demo");
    request.set_world_size(world_size);
    if (rank.has_value()) request.set_requested_rank(*rank);
    PendingCallbacks callbacks;
    absl::Status status = group_->Join(identity, "ipv4:127.0.0.1:1", request,
                                       Session(identity), now, &callbacks);
    callbacks.Run();
    return status;
  }

  // Forms epoch 1 with site-a, site-b, site-c at ranks 0, 1, 2.
  void Form(absl::Time now = kT0) {
    ASSERT_TRUE(Join("site-b", now).ok());
    ASSERT_TRUE(Join("site-c", now).ok());
    ASSERT_TRUE(Join("site-a", now).ok());
    for (const char* id : {"site-a", "site-b", "site-c"}) {
      ASSERT_EQ(Session(id)->joined.size(), 1u) << id;
    }
  }

  absl::StatusOr<std::shared_ptr<Round>> Find(const std::string& identity,
                                              uint32_t rank, uint64_t seq,
                                              uint64_t epoch = 1,
                                              absl::Time now = kT0,
                                              bool resume = false) {
    v1::CollectiveHeader header;
    header.set_group("demo");
    header.set_epoch(epoch);
    header.set_seq(seq);
    header.set_op(v1::ALL_GATHER);
    header.set_rank(rank);
    header.set_resume(resume);
    PendingCallbacks callbacks;
    absl::StatusOr<std::shared_ptr<Round>> round =
        group_->FindRound(identity, header, now, &callbacks);
    callbacks.Run();
    return round;
  }

  // Rejoin joins `identity` again at `rank`, resuming `epoch`, through a new
  // session (which replaces its old one in Session()).
  absl::Status Rejoin(const std::string& identity, uint32_t rank,
                      uint64_t epoch, absl::Time now) {
    sessions_[identity] = std::make_shared<FakeSession>();
    v1::JoinRequest request;
    request.set_group("demo");
    request.set_world_size(3);
    request.set_requested_rank(rank);
    request.set_resume_epoch(epoch);
    PendingCallbacks callbacks;
    absl::Status status = group_->Join(identity, "ipv4:127.0.0.1:2", request,
                                       Session(identity), now, &callbacks);
    callbacks.Run();
    return status;
  }

  void LoseSession(const std::string& identity, absl::Time now) {
    PendingCallbacks callbacks;
    group_->SessionLost(Session(identity).get(), "the connection reset", now,
                        &callbacks);
    callbacks.Run();
  }

  absl::Duration resume_grace_ = absl::ZeroDuration();  // set before MakeGroup
  int max_rounds_in_flight_ = kDefaultGroupRoundsInFlight;  // likewise
  // What limits.admission answers; a test closes the gate by setting it.
  absl::Status admission_;

  void CheckTimers(absl::Time now) {
    PendingCallbacks callbacks;
    group_->CheckTimers(now, &callbacks);
    callbacks.Run();
  }

  void HeartbeatAll(absl::Time now) {
    for (const char* id : {"site-a", "site-b", "site-c"}) {
      group_->Heartbeat(Session(id).get(), now);
    }
  }

  // The round told `rank`'s stream to finish with this status.
  static absl::Status RoundFailure(Round& round, int rank) {
    PendingCallbacks callbacks;
    Outgoing out = round.NextOutgoing(rank, &callbacks);
    EXPECT_EQ(out.kind, Outgoing::Kind::kFinish);
    return out.status;
  }

  testing::RecordingEvents events_;
  std::unique_ptr<GroupState> group_;
  std::map<std::string, std::shared_ptr<FakeSession>> sessions_;
};

TEST_F(GroupStateTest, AssignsRanksBySortedIdentity) {
  MakeGroup();
  ASSERT_TRUE(Join("site-c").ok());
  ASSERT_TRUE(Join("site-a").ok());
  EXPECT_THAT(Session("site-a")->joined, IsEmpty());  // not formed yet
  EXPECT_THAT(Session("site-c")->joined, IsEmpty());
  ASSERT_TRUE(Join("site-b").ok());

  const std::vector<std::string> order = {"site-a", "site-b", "site-c"};
  for (uint32_t r = 0; r < 3; ++r) {
    const std::vector<v1::Joined>& got = Session(order[r])->joined;
    ASSERT_EQ(got.size(), 1u) << order[r];
    const v1::Joined& joined = got[0];
    EXPECT_EQ(joined.group(), "demo");
    EXPECT_EQ(joined.epoch(), 1u);
    EXPECT_EQ(joined.rank(), r);
    EXPECT_EQ(joined.world_size(), 3u);
    EXPECT_EQ(joined.heartbeat_interval_ms(), 1000u);
    EXPECT_EQ(joined.heartbeat_timeout_ms(), 5000u);
    EXPECT_EQ(joined.max_chunk_bytes(), 1024u);
    ASSERT_EQ(joined.members_size(), 3);
    for (int m = 0; m < 3; ++m) {
      EXPECT_EQ(joined.members(m).rank(), static_cast<uint32_t>(m));
      EXPECT_EQ(joined.members(m).identity(), order[m]);
    }
    EXPECT_THAT(Session(order[r])->closes, IsEmpty());
  }
  EXPECT_EQ(events_.OfKind(EventKind::kMemberJoined).size(), 3u);
  ASSERT_EQ(events_.OfKind(EventKind::kGroupFormed).size(), 1u);
  EXPECT_EQ(events_.OfKind(EventKind::kGroupFormed)[0].epoch, 1u);
}

TEST_F(GroupStateTest, PeerLinkBytesAddUpPerMemberAndEpochWithinABound) {
  MakeGroup();
  Form();
  group_->AddPeerLinkBytes(1, 0, 1000, 10);
  group_->AddPeerLinkBytes(1, 0, 500, 5);
  group_->AddPeerLinkBytes(2, 1, 7, 7);           // another epoch: ignored
  group_->AddPeerLinkBytes(1, 3, 7, 7);           // no such rank: ignored
  group_->AddPeerLinkBytes(1, 2, UINT64_MAX, 0);  // counted as 1 TiB
  group_->AddPeerLinkBytes(1, 2, uint64_t{1} << 41, 0);
  const GroupState::Snapshot snapshot = group_->GetSnapshot();
  ASSERT_EQ(snapshot.members.size(), 3u);
  EXPECT_EQ(snapshot.members[0].peer_link_bytes_sent, 1500);
  EXPECT_EQ(snapshot.members[0].peer_link_bytes_received, 15);
  EXPECT_EQ(snapshot.members[1].peer_link_bytes_sent, 0);
  EXPECT_EQ(snapshot.members[2].peer_link_bytes_sent, int64_t{1} << 41);
}

TEST_F(GroupStateTest, HonoursRequestedRankAndSortsTheRest) {
  MakeGroup({"site-a", "site-b", "site-c", "site-d"});
  ASSERT_TRUE(Join("site-d", kT0, /*rank=*/1).ok());
  ASSERT_TRUE(Join("site-c").ok());
  ASSERT_TRUE(Join("site-b").ok());
  ASSERT_EQ(Session("site-b")->joined.size(), 1u);
  ASSERT_EQ(Session("site-c")->joined.size(), 1u);
  ASSERT_EQ(Session("site-d")->joined.size(), 1u);
  EXPECT_EQ(Session("site-b")->joined[0].rank(), 0u);
  EXPECT_EQ(Session("site-d")->joined[0].rank(), 1u);
  EXPECT_EQ(Session("site-c")->joined[0].rank(), 2u);
  const v1::Joined& joined = Session("site-b")->joined[0];
  ASSERT_EQ(joined.members_size(), 3);
  EXPECT_EQ(joined.members(0).identity(), "site-b");
  EXPECT_EQ(joined.members(1).identity(), "site-d");
  EXPECT_EQ(joined.members(2).identity(), "site-c");
}

TEST_F(GroupStateTest, RequestedLastRankPushesSortedOnesDown) {
  MakeGroup();
  ASSERT_TRUE(Join("site-a", kT0, /*rank=*/2).ok());
  ASSERT_TRUE(Join("site-c", kT0, /*rank=*/0).ok());
  ASSERT_TRUE(Join("site-b").ok());
  EXPECT_EQ(Session("site-c")->joined.at(0).rank(), 0u);
  EXPECT_EQ(Session("site-b")->joined.at(0).rank(), 1u);
  EXPECT_EQ(Session("site-a")->joined.at(0).rank(), 2u);
}

TEST_F(GroupStateTest, NonMemberIsPermissionDenied) {
  MakeGroup();
  const absl::Status status = Join("site-x");
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_EQ(status, NotAMemberError("site-x", "demo"));
  EXPECT_THAT(Session("site-x")->closes, IsEmpty());
}

TEST_F(GroupStateTest, WrongWorldSizeIsInvalidArgument) {
  MakeGroup();
  const absl::Status status = Join("site-a", kT0, std::nullopt, 4);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("group 'demo' has world size 3; the join asked for 4"));
  // The refused join left nothing waiting.
  EXPECT_TRUE(Join("site-a").ok());
}

TEST_F(GroupStateTest, RequestedRankOutOfRangeIsInvalidArgument) {
  MakeGroup();
  const absl::Status status = Join("site-a", kT0, /*rank=*/3);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("rank 3 is out of range for group 'demo' of world "
                        "size 3"));
}

TEST_F(GroupStateTest, RequestedRankTakenIsAlreadyExistsNamingHolder) {
  MakeGroup();
  ASSERT_TRUE(Join("site-a", kT0, /*rank=*/1).ok());
  const absl::Status status = Join("site-b", kT0, /*rank=*/1);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("rank 1 of group 'demo' is already taken by 'site-a'"));
  // site-b may still join without that rank.
  EXPECT_TRUE(Join("site-b", kT0, /*rank=*/0).ok());
}

TEST_F(GroupStateTest, SameIdentityWaitingTwiceIsAlreadyExists) {
  MakeGroup();
  ASSERT_TRUE(Join("site-a").ok());
  const absl::Status status = Join("site-a");
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("identity 'site-a' is already waiting"));
}

TEST_F(GroupStateTest, LostWaitingSessionMayJoinAgain) {
  MakeGroup();
  ASSERT_TRUE(Join("site-a").ok());
  {
    PendingCallbacks callbacks;
    group_->SessionLost(Session("site-a").get(), "gone", absl::InfinitePast(),
                        &callbacks);
    callbacks.Run();
  }
  EXPECT_THAT(Session("site-a")->closes, IsEmpty());
  sessions_.erase("site-a");
  EXPECT_TRUE(Join("site-a").ok());
}

TEST_F(GroupStateTest, JoinWhenFormedAndFullIsFailedPrecondition) {
  MakeGroup({"site-a", "site-b", "site-c", "site-d"});
  Form();
  const absl::Status status = Join("site-d");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("group 'demo' epoch 1 is formed with all 3 members"));
  // The formed epoch is untouched.
  for (const char* id : {"site-a", "site-b", "site-c"}) {
    EXPECT_THAT(Session(id)->closes, IsEmpty()) << id;
  }
  EXPECT_TRUE(Find("site-a", 0, 0).ok());
}

TEST_F(GroupStateTest, MemberJoiningAgainEndsTheEpoch) {
  MakeGroup();
  Form();
  std::shared_ptr<FakeSession> old_b = Session("site-b");
  sessions_.erase("site-b");
  ASSERT_TRUE(Join("site-b").ok());
  const absl::Status expected = absl::UnavailableError(
      "group 'demo' epoch 1: rank 1 (site-b) joined again, so the epoch "
      "ended; join again");
  EXPECT_THAT(old_b->closes, ElementsAre(expected));
  EXPECT_THAT(Session("site-a")->closes, ElementsAre(expected));
  EXPECT_THAT(Session("site-c")->closes, ElementsAre(expected));
  EXPECT_THAT(Session("site-b")->closes, IsEmpty());
  // The new session waits for epoch 2.
  sessions_.erase("site-a");
  sessions_.erase("site-c");
  ASSERT_TRUE(Join("site-a").ok());
  ASSERT_TRUE(Join("site-c").ok());
  ASSERT_EQ(Session("site-b")->joined.size(), 1u);
  EXPECT_EQ(Session("site-b")->joined[0].epoch(), 2u);
}

TEST_F(GroupStateTest, SessionLostEndsEpochAndFailsRounds) {
  MakeGroup();
  Form();
  absl::StatusOr<std::shared_ptr<Round>> round = Find("site-a", 0, 0);
  ASSERT_TRUE(round.ok()) << round.status();
  {
    PendingCallbacks callbacks;
    group_->SessionLost(Session("site-b").get(), "the connection reset",
                        absl::InfinitePast(), &callbacks);
    callbacks.Run();
  }
  const absl::Status expected = absl::UnavailableError(
      "group 'demo' epoch 1: rank 1 (site-b) disconnected: the connection "
      "reset");
  EXPECT_THAT(Session("site-a")->closes, ElementsAre(expected));
  EXPECT_THAT(Session("site-c")->closes, ElementsAre(expected));
  EXPECT_THAT(Session("site-b")->closes, IsEmpty());  // it is already gone
  for (int r = 0; r < 3; ++r) EXPECT_EQ(RoundFailure(**round, r), expected);

  // Streams that still name epoch 1 learn why it ended.
  absl::StatusOr<std::shared_ptr<Round>> stale = Find("site-c", 2, 0);
  EXPECT_EQ(stale.status(), expected);

  const std::vector<ServerEvent> dissolved =
      events_.OfKind(EventKind::kGroupDissolved);
  ASSERT_EQ(dissolved.size(), 1u);
  EXPECT_EQ(dissolved[0].status, expected);

  // A second report of the same loss changes nothing.
  {
    PendingCallbacks callbacks;
    group_->SessionLost(Session("site-b").get(), "again", absl::InfinitePast(),
                        &callbacks);
    callbacks.Run();
  }
  EXPECT_EQ(Session("site-a")->closes.size(), 1u);
}

TEST_F(GroupStateTest, ALostSessionResumesItsRankWithinTheGrace) {
  // Times stay within the others' 5 s heartbeat timeout.
  resume_grace_ = absl::Seconds(3);
  MakeGroup();
  Form();
  LoseSession("site-b", kT0 + absl::Seconds(1));
  EXPECT_THAT(Session("site-a")->closes, IsEmpty());  // the epoch goes on
  CheckTimers(kT0 + absl::Milliseconds(3500));
  EXPECT_THAT(Session("site-a")->closes, IsEmpty());
  // A resume that names an old epoch, or another identity's rank, is refused.
  const absl::Time later = kT0 + absl::Milliseconds(3900);
  EXPECT_EQ(Rejoin("site-b", 1, 7, later).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Rejoin("site-c", 1, 1, later).code(),
            absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(Rejoin("site-b", 1, 1, later).ok());
  ASSERT_EQ(Session("site-b")->joined.size(), 1u);
  EXPECT_EQ(Session("site-b")->joined[0].epoch(), 1u);
  EXPECT_EQ(Session("site-b")->joined[0].rank(), 1u);
  // Past the old grace the epoch goes on, and rank 1 runs rounds in it.
  CheckTimers(kT0 + absl::Milliseconds(4500));
  EXPECT_THAT(Session("site-a")->closes, IsEmpty());
  EXPECT_TRUE(Find("site-b", 1, 0, 1, kT0 + absl::Milliseconds(4500)).ok());
}

TEST_F(GroupStateTest, ALostSessionThatDoesNotResumeEndsTheEpoch) {
  resume_grace_ = absl::Seconds(3);
  MakeGroup();
  Form();
  LoseSession("site-b", kT0);
  CheckTimers(kT0 + absl::Seconds(3));
  const absl::Status expected = absl::UnavailableError(
      "group 'demo' epoch 1: rank 1 (site-b) disconnected: the connection "
      "reset, and did not resume within 3s");
  EXPECT_THAT(Session("site-a")->closes, ElementsAre(expected));
  EXPECT_EQ(Rejoin("site-b", 1, 1, kT0 + absl::Seconds(4)).code(),
            absl::StatusCode::kFailedPrecondition);
}

class NullRoundStream : public RoundStream {
 public:
  void WakeWriter() override {}
  void ResumeReading() override {}
};

// A member that leaves once it has its commit ends the epoch, but a rank
// whose download broke before its commit still resumes the round, until the
// round is settled (Seen in CI: FaultTest.ServerKilledMidRoundAndRestarted-
// LosesNothing, where one site finished and left before another resumed).
TEST_F(GroupStateTest, AnEndedEpochsCompletedRoundIsResumableUntilSettled) {
  resume_grace_ = absl::Seconds(3);
  MakeGroup();
  Form();
  // Round 0: every rank contributes an empty tensor.
  const Fingerprint empty = {TensorSpec{"w", DType::kU8, {0}}};
  const Digest digest = HashContent(DigestAlgorithm::kBlake3, nullptr, 0);
  std::shared_ptr<Round> round;
  auto streams = std::make_shared<NullRoundStream>();
  const char* ids[] = {"site-a", "site-b", "site-c"};
  for (uint32_t r = 0; r < 3; ++r) {
    absl::StatusOr<std::shared_ptr<Round>> found = Find(ids[r], r, 0);
    ASSERT_TRUE(found.ok()) << found.status();
    round = *found;
    v1::CollectiveFrame frame;
    *frame.mutable_header() = v1::CollectiveHeader();
    frame.mutable_header()->set_rank(r);
    PendingCallbacks callbacks;
    AttachRequest request;
    request.rank = static_cast<int>(r);
    request.peer = "ipv4:127.0.0.1:1";
    request.header = frame.header();
    request.fingerprint = empty;
    request.header_frame = EncodeFrame(frame);
    request.stream = streams;
    ASSERT_TRUE(round->Attach(std::move(request), &callbacks).ok());
    round->EndContribution(r, digest, &callbacks);
    callbacks.Run();
  }
  ASSERT_TRUE(round->Complete());
  // Ranks 1 and 2 get everything and their commit; rank 0's stream breaks.
  for (int r : {1, 2}) {
    for (;;) {
      PendingCallbacks callbacks;
      Outgoing out = round->NextOutgoing(r, &callbacks);
      if (out.kind != Outgoing::Kind::kFrame) {
        ASSERT_EQ(out.kind, Outgoing::Kind::kCommitAndFinish) << r;
        break;
      }
      round->WriteDone(r, /*ok=*/true, &callbacks);
    }
  }
  {
    PendingCallbacks callbacks;
    round->StreamLost(0, "reset", kT0, &callbacks);
    group_->SessionLost(Session("site-b").get(), "it left the group", At(1),
                        &callbacks, /*left=*/true);
    callbacks.Run();
  }
  ASSERT_EQ(Session("site-a")->closes.size(), 1u);  // the epoch ended
  // Rank 0 resumes it; nobody else may, nor a seq the epoch did not run.
  absl::StatusOr<std::shared_ptr<Round>> resumed =
      Find("site-a", 0, 0, 1, At(2), /*resume=*/true);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->get(), round.get());
  EXPECT_EQ(Find("site-c", 0, 0, 1, At(2), true).status().code(),
            absl::StatusCode::kPermissionDenied);
  const absl::Status ended = Session("site-a")->closes[0];
  EXPECT_EQ(Find("site-a", 0, 1, 1, At(2), true).status(), ended);
  EXPECT_EQ(Find("site-a", 0, 0, 1, At(2), false).status(), ended);
  // Rank 0 does not come back: past its grace it is given up on, and a
  // grace later the round is settled and gone.
  CheckTimers(At(4));
  EXPECT_TRUE(Find("site-a", 0, 0, 1, At(4), true).ok());
  CheckTimers(At(7));
  EXPECT_EQ(Find("site-a", 0, 0, 1, At(7), true).status(), ended);
}

// Issue 18: one identity could hold a round per stream (31 at once).
TEST_F(GroupStateTest, AHeaderPastMaxRoundsInFlightEndsTheEpoch) {
  max_rounds_in_flight_ = 2;
  MakeGroup();
  Form();
  ASSERT_TRUE(Find("site-a", 0, 0).ok());
  ASSERT_TRUE(Find("site-a", 0, 1).ok());
  ASSERT_TRUE(Find("site-b", 1, 0).ok());  // a round in flight: no new one
  const absl::Status third = Find("site-a", 0, 2).status();
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted) << third;
  EXPECT_THAT(std::string(third.message()),
              HasSubstr("group 'demo' epoch 1: rank 0 (site-a) started seq 2 "
                        "while 2 rounds are in flight, the group's "
                        "max_rounds_in_flight; the epoch ended"));
  EXPECT_THAT(Session("site-b")->closes, ElementsAre(third));
}

TEST_F(GroupStateTest, FindRoundSharesOneRoundPerSeq) {
  MakeGroup();
  Form();
  absl::StatusOr<std::shared_ptr<Round>> a = Find("site-a", 0, 0);
  absl::StatusOr<std::shared_ptr<Round>> b = Find("site-b", 1, 0);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ((*a)->Describe(), "group 'demo' epoch 1 seq 0");
  absl::StatusOr<std::shared_ptr<Round>> next = Find("site-a", 0, 1);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_NE(next->get(), a->get());
  EXPECT_EQ((*next)->Describe(), "group 'demo' epoch 1 seq 1");
}

TEST_F(GroupStateTest, FindRoundWithWrongIdentityIsPermissionDenied) {
  MakeGroup();
  Form();
  absl::StatusOr<std::shared_ptr<Round>> round = Find("site-b", 0, 0);
  EXPECT_EQ(round.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(round.status().message()),
              HasSubstr("identity 'site-b' may not act as rank 0"));
  // Nothing ended, and rank 0's seq did not advance.
  EXPECT_THAT(Session("site-a")->closes, IsEmpty());
  EXPECT_TRUE(Find("site-a", 0, 0).ok());
  EXPECT_TRUE(Find("site-b", 1, 0).ok());
}

TEST_F(GroupStateTest, FindRoundRankOutOfRangeIsInvalidArgument) {
  MakeGroup();
  Form();
  absl::StatusOr<std::shared_ptr<Round>> round = Find("site-a", 3, 0);
  EXPECT_EQ(round.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(round.status().message()),
              HasSubstr("rank 3 is out of range for world size 3"));
}

TEST_F(GroupStateTest, FindRoundBeforeFormingIsFailedPrecondition) {
  MakeGroup();
  ASSERT_TRUE(Join("site-a").ok());
  absl::StatusOr<std::shared_ptr<Round>> round = Find("site-a", 0, 0, 0);
  EXPECT_EQ(round.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(round.status().message()),
              HasSubstr("group 'demo' is not formed"));
}

TEST_F(GroupStateTest, FindRoundForWrongEpochIsFailedPrecondition) {
  MakeGroup();
  Form();
  absl::StatusOr<std::shared_ptr<Round>> round = Find("site-a", 0, 3, 7);
  EXPECT_EQ(round.status().code(), absl::StatusCode::kFailedPrecondition);
  // It names the group, and the rank, identity and seq it is about.
  EXPECT_THAT(std::string(round.status().message()),
              HasSubstr("group 'demo' is at epoch 1; the collective of rank 0 "
                        "(site-a) seq 3 named epoch 7"));
}

TEST_F(GroupStateTest, SeqOutOfOrderEndsTheEpoch) {
  MakeGroup();
  Form();
  absl::StatusOr<std::shared_ptr<Round>> round = Find("site-b", 1, 0);
  ASSERT_TRUE(round.ok()) << round.status();
  absl::StatusOr<std::shared_ptr<Round>> skipped = Find("site-a", 0, 1);
  const absl::Status expected = absl::FailedPreconditionError(
      "group 'demo' epoch 1: rank 0 (site-a) sent seq 1 but its next "
      "collective is seq 0; the ranks are calling collectives in a different "
      "order, so the epoch ended; join again");
  EXPECT_EQ(skipped.status(), expected);
  for (const char* id : {"site-a", "site-b", "site-c"}) {
    EXPECT_THAT(Session(id)->closes, ElementsAre(expected)) << id;
  }
  for (int r = 0; r < 3; ++r) EXPECT_EQ(RoundFailure(**round, r), expected);
  EXPECT_EQ(Find("site-c", 2, 0).status(), expected);
}

TEST_F(GroupStateTest, HeartbeatTimeoutEndsTheEpoch) {
  MakeGroup();
  Form(kT0);
  absl::StatusOr<std::shared_ptr<Round>> round = Find("site-a", 0, 0);
  ASSERT_TRUE(round.ok()) << round.status();
  group_->Heartbeat(Session("site-a").get(), At(4));
  group_->Heartbeat(Session("site-c").get(), At(4));

  CheckTimers(At(5));  // site-b silent for exactly the timeout: still fine
  for (const char* id : {"site-a", "site-b", "site-c"}) {
    EXPECT_THAT(Session(id)->closes, IsEmpty()) << id;
  }

  CheckTimers(At(6));
  const absl::Status expected = absl::UnavailableError(
      "group 'demo' epoch 1: rank 1 (site-b) sent no heartbeat for 6s "
      "(timeout 5s)");
  for (const char* id : {"site-a", "site-b", "site-c"}) {
    EXPECT_THAT(Session(id)->closes, ElementsAre(expected)) << id;
  }
  EXPECT_EQ(RoundFailure(**round, 0), expected);
  EXPECT_EQ(Find("site-b", 1, 0).status(), expected);
}

TEST_F(GroupStateTest, HeartbeatsKeepTheEpochAlive) {
  MakeGroup();
  Form(kT0);
  for (int t = 3; t <= 30; t += 3) {
    HeartbeatAll(At(t));
    CheckTimers(At(t + 2));
  }
  for (const char* id : {"site-a", "site-b", "site-c"}) {
    EXPECT_THAT(Session(id)->closes, IsEmpty()) << id;
  }
  EXPECT_TRUE(Find("site-a", 0, 0, 1, At(32)).ok());
}

TEST_F(GroupStateTest, JoinTimeoutClosesWaitingSessionsNamingMissing) {
  MakeGroup();
  ASSERT_TRUE(Join("site-a", At(0)).ok());
  ASSERT_TRUE(Join("site-b", At(30)).ok());

  CheckTimers(At(59));
  EXPECT_THAT(Session("site-a")->closes, IsEmpty());

  CheckTimers(At(60));
  EXPECT_THAT(Session("site-a")->closes,
              ElementsAre(absl::DeadlineExceededError(
                  "group 'demo' did not form within 1m: 2 of 3 members "
                  "joined (site-a, site-b); not joined: site-c")));
  EXPECT_THAT(Session("site-b")->closes, IsEmpty());

  CheckTimers(At(90));
  EXPECT_THAT(Session("site-b")->closes,
              ElementsAre(absl::DeadlineExceededError(
                  "group 'demo' did not form within 1m: 1 of 3 members "
                  "joined (site-b); not joined: site-c, site-a")));
  // Timed-out members are no longer waiting, so they may join again.
  sessions_.clear();
  EXPECT_TRUE(Join("site-a", At(91)).ok());
  EXPECT_TRUE(Join("site-b", At(91)).ok());
  EXPECT_TRUE(Join("site-c", At(91)).ok());
  EXPECT_EQ(Session("site-c")->joined.size(), 1u);
}

TEST_F(GroupStateTest, RoundDeadlineViaCheckTimers) {
  MakeGroup();
  Form(kT0);
  absl::StatusOr<std::shared_ptr<Round>> round =
      Find("site-a", 0, 0, 1, At(10));  // deadline At(40)
  ASSERT_TRUE(round.ok()) << round.status();
  ASSERT_TRUE(Find("site-b", 1, 0, 1, At(11)).ok());

  HeartbeatAll(At(39));
  CheckTimers(At(39));
  PendingCallbacks callbacks;
  EXPECT_EQ((*round)->NextOutgoing(0, &callbacks).kind,
            Outgoing::Kind::kNothing);

  HeartbeatAll(At(40));
  CheckTimers(At(40));
  const absl::Status failure = RoundFailure(**round, 0);
  EXPECT_EQ(failure.code(), absl::StatusCode::kDeadlineExceeded) << failure;
  EXPECT_THAT(std::string(failure.message()),
              HasSubstr("group 'demo' epoch 1 seq 0 exceeded its deadline of "
                        "30s; missing contributions: rank 0 (site-a): not "
                        "started; rank 1 (site-b): not started; rank 2 "
                        "(site-c): not started"));
  // The epoch goes on: no session was closed.
  for (const char* id : {"site-a", "site-b", "site-c"}) {
    EXPECT_THAT(Session(id)->closes, IsEmpty()) << id;
  }
  // A rank that arrives late gets the round's outcome, and the next seq works.
  EXPECT_EQ(Find("site-c", 2, 0, 1, At(41)).status(), failure);
  absl::StatusOr<std::shared_ptr<Round>> next = Find("site-a", 0, 1, 1, At(41));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_NE(next->get(), round->get());
}

}  // namespace
}  // namespace fedgather::server

namespace fedgather::server {
namespace {

GroupConfig DemoConfig(int world, std::vector<std::string> members) {
  GroupConfig config;
  config.name = "demo";
  config.world_size = world;
  config.members = std::move(members);
  return config;
}

TEST_F(GroupStateTest, ReconfigureRefusesWaitingMembersNoLongerListed) {
  MakeGroup();
  ASSERT_TRUE(Join("site-a").ok());
  ASSERT_TRUE(Join("site-b").ok());
  {
    PendingCallbacks callbacks;
    group_->Reconfigure(DemoConfig(3, {"site-b", "site-c", "site-d"}),
                        &callbacks);
    callbacks.Run();
  }
  ASSERT_EQ(Session("site-a")->closes.size(), 1u);
  EXPECT_EQ(Session("site-a")->closes[0], NotAMemberError("site-a", "demo"));
  EXPECT_THAT(Session("site-b")->closes, IsEmpty());
  ASSERT_EQ(events_.OfKind(EventKind::kJoinRefused).size(), 1u);
  EXPECT_EQ(events_.OfKind(EventKind::kJoinRefused)[0].identity, "site-a");
  // The new members complete the group with site-b.
  ASSERT_TRUE(Join("site-c").ok());
  ASSERT_TRUE(Join("site-d").ok());
  EXPECT_EQ(Session("site-d")->joined.size(), 1u);
  EXPECT_EQ(Session("site-d")->joined[0].members(1).identity(), "site-c");
}

TEST_F(GroupStateTest, ReconfigureWithNewWorldSizeAbortsEveryWaitingMember) {
  MakeGroup();
  ASSERT_TRUE(Join("site-a").ok());
  {
    PendingCallbacks callbacks;
    group_->Reconfigure(DemoConfig(2, {"site-a", "site-b", "site-c"}),
                        &callbacks);
    callbacks.Run();
  }
  ASSERT_EQ(Session("site-a")->closes.size(), 1u);
  EXPECT_EQ(Session("site-a")->closes[0].code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(Session("site-a")->closes[0].message()),
              HasSubstr("changed the world size of group 'demo' from 3 to 2"));
  EXPECT_EQ(Join("site-a", kT0, std::nullopt, 3).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(GroupStateTest, ReconfigureKeepingTheMembersLeavesTheEpochAlone) {
  MakeGroup();
  Form();
  absl::StatusOr<std::shared_ptr<Round>> round = Find("site-a", 0, 0);
  ASSERT_TRUE(round.ok());
  {
    PendingCallbacks callbacks;
    group_->Reconfigure(DemoConfig(3, {"site-a", "site-b", "site-c", "x"}),
                        &callbacks);
    callbacks.Run();
  }
  for (const char* id : {"site-a", "site-b", "site-c"}) {
    EXPECT_THAT(Session(id)->closes, IsEmpty()) << id;
  }
  absl::StatusOr<std::shared_ptr<Round>> same = Find("site-b", 1, 0);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->get(), round->get());
  EXPECT_TRUE(Find("site-a", 0, 1).ok());
}

// The digest algorithm is fixed when an epoch forms: a reload that changes
// it leaves the formed epoch's rounds as they were and names the next
// epoch's.
TEST_F(GroupStateTest, AReloadChangesTheDigestAlgorithmOfTheNextEpochOnly) {
  MakeGroup();
  Form();
  EXPECT_EQ(Session("site-a")->joined[0].digest_algorithm(), v1::DIGEST_BLAKE3);
  GroupConfig sha256 = DemoConfig(3, {"site-a", "site-b", "site-c"});
  sha256.digest = DigestAlgorithm::kSha256;
  {
    PendingCallbacks callbacks;
    group_->Reconfigure(sha256, &callbacks);
    callbacks.Run();
  }
  absl::StatusOr<std::shared_ptr<Round>> round = Find("site-a", 0, 0);
  ASSERT_TRUE(round.ok()) << round.status();
  EXPECT_EQ((*round)->digest_algorithm(), DigestAlgorithm::kBlake3);

  LoseSession("site-a", At(1));  // no resume grace: the epoch ends
  sessions_.clear();
  Form(At(2));
  const v1::Joined& joined = Session("site-a")->joined[0];
  EXPECT_EQ(joined.epoch(), 2u);
  EXPECT_EQ(joined.digest_algorithm(), v1::DIGEST_SHA256);
  absl::StatusOr<std::shared_ptr<Round>> next =
      Find("site-a", 0, 0, /*epoch=*/2, At(2));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ((*next)->digest_algorithm(), DigestAlgorithm::kSha256);
}

TEST_F(GroupStateTest, ReconfigureRemovingAMemberClosesTheEpoch) {
  MakeGroup();
  Form();
  // Seq 0 is in flight and still waits for site-c, which the reload removes:
  // it fails at once, and with no round left the epoch ends.
  absl::StatusOr<std::shared_ptr<Round>> round = Find("site-a", 0, 0);
  ASSERT_TRUE(round.ok());
  {
    PendingCallbacks callbacks;
    group_->Reconfigure(DemoConfig(3, {"site-a", "site-b", "site-d"}),
                        &callbacks);
    callbacks.Run();
  }
  const absl::Status closed = absl::AbortedError(
      "group 'demo' epoch 1 was closed by a policy reload that removed "
      "site-c; join again");
  EXPECT_EQ(RoundFailure(**round, 0), closed);
  for (const char* id : {"site-a", "site-b", "site-c"}) {
    EXPECT_THAT(Session(id)->closes, ElementsAre(closed)) << id;
  }
  EXPECT_EQ(Find("site-b", 1, 0).status(), closed);
  ASSERT_EQ(events_.OfKind(EventKind::kGroupDissolved).size(), 1u);
  EXPECT_EQ(events_.OfKind(EventKind::kGroupDissolved)[0].status, closed);
}

// Issue 17, finding 7: a reload that grows the world size while a round of
// the old epoch is open let a new member resume a rank the epoch does not
// have, and the resume read past the epoch's member list.
TEST_F(GroupStateTest, AResumeOfARankTheEpochDoesNotHaveIsRefused) {
  resume_grace_ = absl::Seconds(3);
  MakeGroup();
  Form();
  absl::StatusOr<std::shared_ptr<Round>> round = Find("site-a", 0, 0);
  ASSERT_TRUE(round.ok());
  {
    PendingCallbacks callbacks;
    group_->Reconfigure(DemoConfig(4, {"site-a", "site-b", "site-c", "site-d"}),
                        &callbacks);
    callbacks.Run();
  }
  sessions_["site-d"] = std::make_shared<FakeSession>();
  v1::JoinRequest request;
  request.set_group("demo");
  request.set_world_size(4);
  request.set_requested_rank(3);
  request.set_resume_epoch(1);
  PendingCallbacks callbacks;
  const absl::Status refused =
      group_->Join("site-d", "ipv4:127.0.0.1:3", request, Session("site-d"),
                   kT0, &callbacks);
  callbacks.Run();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("identity 'site-d' resumes rank 3, but the epoch has "
                        "ranks 0 to 2"));
  EXPECT_THAT(Session("site-d")->joined, IsEmpty());
}

TEST_F(GroupStateTest, AbortRoundsFailsRoundsInFlightAndKeepsTheEpoch) {
  MakeGroup();
  Form();
  absl::StatusOr<std::shared_ptr<Round>> round = Find("site-a", 0, 0);
  ASSERT_TRUE(round.ok());
  std::vector<uint64_t> aborted;
  {
    PendingCallbacks callbacks;
    aborted = group_->AbortRounds("ops", "bad data", &callbacks);
    callbacks.Run();
  }
  EXPECT_THAT(aborted, ElementsAre(0u));
  const absl::Status expected = absl::AbortedError(
      "group 'demo' epoch 1 seq 0 was aborted by admin 'ops': bad data");
  EXPECT_EQ(RoundFailure(**round, 0), expected);
  // Late ranks get the same answer; the next seq runs.
  EXPECT_EQ(Find("site-b", 1, 0).status(), expected);
  EXPECT_TRUE(Find("site-a", 0, 1).ok());
  for (const char* id : {"site-a", "site-b", "site-c"}) {
    EXPECT_THAT(Session(id)->closes, IsEmpty()) << id;
  }
}

TEST_F(GroupStateTest,
       AClosedAdmissionRefusesJoinsAndNewRoundsNotRoundsInFlight) {
  MakeGroup();
  Form();
  absl::StatusOr<std::shared_ptr<Round>> in_flight = Find("site-a", 0, 0);
  ASSERT_TRUE(in_flight.ok());

  admission_ = absl::UnavailableError("the audit log cannot be written");
  // The round in flight carries on: the other ranks still reach it.
  for (uint32_t rank : {1u, 2u}) {
    absl::StatusOr<std::shared_ptr<Round>> same =
        Find(rank == 1 ? "site-b" : "site-c", rank, 0);
    ASSERT_TRUE(same.ok()) << same.status();
    EXPECT_EQ(same->get(), in_flight->get());
  }
  // A new round is refused, for every rank of its seq alike.
  EXPECT_EQ(Find("site-a", 0, 1).status(), admission_);
  EXPECT_EQ(Find("site-b", 1, 1).status(), admission_);
  // A new join is refused; the epoch is untouched.
  EXPECT_EQ(Join("site-a"), admission_);
  EXPECT_THAT(Session("site-a")->closes, IsEmpty());

  // Open again: the next seq starts a round, the epoch still in step.
  admission_ = absl::OkStatus();
  EXPECT_EQ(Find("site-c", 2, 1).status(),
            absl::UnavailableError("the audit log cannot be written"));
  for (uint32_t rank : {0u, 1u, 2u}) {
    const std::string identity = rank == 0   ? "site-a"
                                 : rank == 1 ? "site-b"
                                             : "site-c";
    EXPECT_TRUE(Find(identity, rank, 2).ok()) << identity;
  }
}

TEST_F(GroupStateTest, SnapshotReportsMembersWaitingAndRounds) {
  MakeGroup();
  ASSERT_TRUE(Join("site-b").ok());
  GroupState::Snapshot waiting = group_->GetSnapshot();
  EXPECT_FALSE(waiting.formed);
  EXPECT_THAT(waiting.waiting, ElementsAre("site-b"));
  ASSERT_TRUE(Join("site-c").ok());
  ASSERT_TRUE(Join("site-a").ok());
  ASSERT_TRUE(Find("site-a", 0, 0).ok());
  GroupState::Snapshot formed = group_->GetSnapshot();
  EXPECT_TRUE(formed.formed);
  EXPECT_EQ(formed.epoch, 1u);
  std::vector<std::string> identities;
  for (const GroupState::MemberSnapshot& m : formed.members) {
    identities.push_back(m.identity);
    EXPECT_TRUE(m.connected) << m.identity;
  }
  EXPECT_THAT(identities, ElementsAre("site-a", "site-b", "site-c"));
  EXPECT_THAT(formed.waiting, IsEmpty());
  ASSERT_EQ(formed.rounds.size(), 1u);
  EXPECT_EQ(formed.rounds[0].seq, 0u);
  EXPECT_THAT(formed.rounds[0].started, IsEmpty());
}

}  // namespace
}  // namespace fedgather::server
