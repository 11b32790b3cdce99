// Durable rounds end to end: a real fedgather-server process with
// --state-dir is killed with SIGKILL while a round is in flight (an
// all_gather, then an all_reduce) and restarted on the same port and state
// directory. The members, one thread each over mutual TLS, resume their
// sessions and collectives and get byte-exact results; the next round
// works; the restarted server reports the restored group. A planned
// restart (SIGTERM, whose drain runs out while a round waits for a rank)
// is as resumable: the drain keeps the epoch and the round journaled.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "tests/e2e/server_process.h"
#include "tests/e2e/test_cluster.h"

namespace fedgather::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kWorld = 3;
constexpr int64_t kMiB = 1 << 20;

int64_t FileSize(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 ? info.st_size : -1;
}

size_t CountOf(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

class RestartTest : public ::testing::Test {
 protected:
  RestartTest()
      : cluster_(Options()),
        server_(cluster_,
                {"--state-dir", cluster_.dir() + "/state", "--resume-grace",
                 "60", "--heartbeat-interval", "0.2", "--drain-timeout", "1",
                 "--log-format", "text"}) {}

  static ClusterOptions Options() {
    ClusterOptions options(kWorld);
    options.in_process_server = false;
    return options;
  }

  void JoinEveryone() {
    for (int r = 0; r < kWorld; ++r) {
      clients_.push_back(
          cluster_.ConnectVia(TestCluster::Site(r), server_.address()));
      ASSERT_NE(clients_.back(), nullptr);
    }
    groups_.resize(kWorld);
    RunRanks(kWorld, [&](int r) {
      JoinOptions join{"demo", kWorld, r, absl::Seconds(60)};
      join.resume_grace = absl::Seconds(60);
      absl::StatusOr<std::unique_ptr<Group>> group = clients_[r]->Join(join);
      ASSERT_TRUE(group.ok()) << group.status();
      groups_[r] = *std::move(group);
    });
  }

  enum class Stop { kKill, kSigterm };

  // Restart stops the server as `how` says (SIGTERM: it must exit 0) and
  // starts it again on the same port.
  void Restart(Stop how) {
    const int port = server_.port();
    if (how == Stop::kKill) {
      server_.Kill();
    } else {
      EXPECT_EQ(server_.Stop(absl::Seconds(30)), 0) << server_.Log();
    }
    server_.Start(port);
  }

  // RunRoundAcrossARestart runs `collective(rank)` on every rank. Ranks 0
  // and 1 start at once; once the round's journal holds `journaled` bytes
  // the server is restarted (Restart), and only then does rank 2 start.
  std::vector<absl::Status> RunRoundAcrossARestart(
      Stop how, uint64_t seq, int64_t journaled,
      const std::function<absl::Status(int)>& collective) {
    absl::Notification restarted;
    std::vector<absl::Status> status(kWorld);
    const std::string journal = absl::StrCat(
        (cluster_.dir() + "/state"), "/groups/demo/round-", seq, ".journal");
    RunRanks(kWorld + 1, [&](int r) {
      if (r < 2) {
        status[r] = collective(r);
      } else if (r == 2) {
        restarted.WaitForNotification();
        status[r] = collective(r);
      } else {  // the operator's thread
        const absl::Time deadline = absl::Now() + absl::Seconds(60);
        while (FileSize(journal) < journaled && absl::Now() < deadline) {
          absl::SleepFor(absl::Milliseconds(5));
        }
        EXPECT_GE(FileSize(journal), journaled) << server_.Log();
        Restart(how);
        restarted.Notify();
      }
    });
    return status;
  }

  // GatherAcrossARestart runs all_gather round `seq` of `bytes` random bytes
  // per rank across a restart (RunRoundAcrossARestart, once ranks 0 and 1
  // have uploaded everything) and expects every rank to get every input
  // byte for byte.
  void GatherAcrossARestart(Stop how, uint64_t seq, int64_t bytes) {
    std::vector<std::vector<uint8_t>> inputs;
    for (int r = 0; r < kWorld; ++r) {
      inputs.push_back(RandomBytes(bytes, 900 + 10 * seq + r));
    }
    std::vector<std::vector<uint8_t>> outputs(
        kWorld, std::vector<uint8_t>(kWorld * bytes));
    std::vector<absl::Status> gathered =
        RunRoundAcrossARestart(how, seq, 2 * bytes, [&](int r) {
          const ConstHostTensor in{{"w", DType::kU8, {bytes}},
                                   inputs[r].data()};
          const MutableHostTensor out{{"w", DType::kU8, {kWorld, bytes}},
                                      outputs[r].data()};
          return groups_[r]->AllGatherInto({&in, 1}, {&out, 1});
        });
    for (int r = 0; r < kWorld; ++r) {
      ASSERT_TRUE(gathered[r].ok())
          << "rank " << r << ": " << gathered[r] << "\n"
          << server_.Log();
      for (int s = 0; s < kWorld; ++s) {
        EXPECT_TRUE(std::equal(inputs[s].begin(), inputs[s].end(),
                               outputs[r].begin() + s * bytes))
            << "rank " << r << " got other bytes for rank " << s;
      }
    }
  }

  TestCluster cluster_;
  ServerProcess server_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<std::unique_ptr<Group>> groups_;
};

TEST_F(RestartTest, RoundsInFlightSurviveAServerKilledAndRestarted) {
  server_.Start(0);
  JoinEveryone();

  // Round 0: an all_gather of 8 MiB per rank, killed once ranks 0 and 1
  // have uploaded everything.
  ASSERT_NO_FATAL_FAILURE(GatherAcrossARestart(Stop::kKill, 0, 8 * kMiB));
  EXPECT_THAT(server_.Log(),
              HasSubstr("group_restored group=demo epoch=1 bytes="));

  // Round 1: an all_reduce (mean of 1M floats), killed once ranks 0 and 1
  // have sent half of theirs.
  constexpr int64_t kFloats = 1 << 20;
  std::vector<std::vector<float>> values(kWorld, std::vector<float>(kFloats));
  std::vector<float> want(kFloats);
  for (int64_t i = 0; i < kFloats; ++i) {
    for (int r = 0; r < kWorld; ++r) {
      values[r][i] = static_cast<float>((i * (r + 3)) % 1000) / 8;
    }
    want[i] = (values[0][i] + values[1][i] + values[2][i]) / kWorld;
  }
  std::vector<std::vector<float>> means(kWorld, std::vector<float>(kFloats));
  std::vector<absl::Status> reduced =
      RunRoundAcrossARestart(Stop::kKill, 1, kFloats * 4, [&](int r) {
        const ConstHostTensor in{{"w", DType::kF32, {kFloats}},
                                 values[r].data()};
        const MutableHostTensor out{{"w", DType::kF32, {kFloats}},
                                    means[r].data()};
        return groups_[r]->AllReduce(absl::MakeConstSpan(&in, 1),
                                     absl::MakeConstSpan(&out, 1), v1::MEAN);
      });
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(reduced[r].ok()) << "rank " << r << ": " << reduced[r] << "\n"
                                 << server_.Log();
    // Multiples of 1/8 below 1000: the fp32 sums and the mean are exact.
    EXPECT_EQ(means[r], want) << "rank " << r;
  }

  // The epoch goes on after two restarts.
  std::vector<absl::Status> next(kWorld);
  RunRanks(kWorld, [&](int r) { next[r] = GatherRanks(*groups_[r]); });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(next[r].ok()) << "rank " << r << ": " << next[r];
  }
  // Both restarts restored the one epoch, each with its round in flight.
  const std::string log = server_.Log();
  EXPECT_EQ(CountOf(log, "group_restored group=demo epoch=1 "), 2u) << log;
  EXPECT_EQ(CountOf(log, "rounds_in_flight=1 "), 2u) << log;
  EXPECT_EQ(CountOf(log, "group_formed "), 1u) << log;
}

TEST_F(RestartTest, APlannedRestartKeepsTheEpochAndItsRoundInFlight) {
  server_.Start(0);
  JoinEveryone();

  // SIGTERM while ranks 0 and 1 have uploaded an all_gather and rank 2 has
  // not started: the one-second drain runs out with the round in flight.
  ASSERT_NO_FATAL_FAILURE(GatherAcrossARestart(Stop::kSigterm, 0, 4 * kMiB));
  EXPECT_THAT(server_.Log(),
              HasSubstr("drained; kept 1 round(s) still in flight in "
                        "--state-dir, for members to resume after the "
                        "restart, stopping"));

  // SIGTERM between rounds: the drain is over at once, and the epoch too
  // survives it.
  Restart(Stop::kSigterm);
  std::vector<absl::Status> next(kWorld);
  RunRanks(kWorld, [&](int r) { next[r] = GatherRanks(*groups_[r]); });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(next[r].ok()) << "rank " << r << ": " << next[r] << "\n"
                              << server_.Log();
  }
  const std::string log = server_.Log();
  EXPECT_EQ(CountOf(log, "group_restored group=demo epoch=1 "), 2u) << log;
  EXPECT_EQ(CountOf(log, "group_formed "), 1u) << log;
  EXPECT_EQ(log.find("shutting down; join again"), std::string::npos) << log;
}

}  // namespace
}  // namespace fedgather::testing
