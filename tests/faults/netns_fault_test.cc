// A network cut between real processes (issue 9): the server runs in one
// network namespace, site-1 and site-3 in a second and site-2 in a third,
// joined to the server's by veth pairs (ip netns; needs root, skipped
// otherwise). Mid-round, site-2's link is cut (set down on both ends) and
// later restored:
//   - a cut shorter than the heartbeat timeout heals: TCP retransmits and
//     the round completes byte for byte;
//   - a longer cut loses site-2: the others fail within the bound naming
//     it, and after the link is back every site runs the next round.
// Each prints "FAULT <case>: bound B, observed O" for the fault matrix.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/common/subprocess.h"
#include "tests/faults/fault_cluster.h"

namespace fedgather::testing {
namespace {

using ::testing::HasSubstr;

constexpr size_t kMiB = 1 << 20;

std::string IpTool() {
  for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return "";
}

// The namespaces and links of one test; removed by the destructor.
class Netns {
 public:
  Netns() : ip_(IpTool()), tag_(std::to_string(::getpid())) {}
  ~Netns() {
    for (const std::string& ns : {server_ns(), ns_a(), ns_b()}) {
      Ip({"netns", "del", ns});  // deletes the veths inside too
    }
  }

  // Setup makes the namespaces and links; returns why it cannot, or "".
  std::string Setup() {
    if (::geteuid() != 0) return "needs root (ip netns)";
    if (ip_.empty()) return "needs the ip tool (iproute2)";
    for (const std::string& ns : {server_ns(), ns_a(), ns_b()}) {
      if (std::string error = Ip({"netns", "add", ns}); !error.empty()) {
        return error;
      }
      Ip({"-n", ns, "link", "set", "lo", "up"});
    }
    for (const auto& [ns, net] : {std::pair{ns_a(), 1}, std::pair{ns_b(), 2}}) {
      const std::string server_end = Veth(net, "s"), site_end = Veth(net, "c");
      for (const std::string& error :
           {Ip({"link", "add", server_end, "netns", server_ns(), "type", "veth",
                "peer", "name", site_end, "netns", ns}),
            Ip({"-n", server_ns(), "addr", "add",
                absl::StrCat("10.201.", net, ".1/24"), "dev", server_end}),
            Ip({"-n", ns, "addr", "add", absl::StrCat("10.201.", net, ".2/24"),
                "dev", site_end}),
            Ip({"-n", server_ns(), "link", "set", server_end, "up"}),
            Ip({"-n", ns, "link", "set", site_end, "up"})}) {
        if (!error.empty()) return error;
      }
    }
    return "";
  }

  // Cut sets both ends of site network `net`'s link down; Restore sets
  // them up again.
  void Cut(int net) { SetLink(net, "down"); }
  void Restore(int net) { SetLink(net, "up"); }

  std::vector<std::string> In(const std::string& ns) const {
    return {ip_, "netns", "exec", ns};
  }
  std::string server_ns() const { return "fgs" + tag_; }
  std::string ns_a() const { return "fga" + tag_; }
  std::string ns_b() const { return "fgb" + tag_; }

 private:
  std::string Veth(int net, const char* end) const {
    return absl::StrCat("fg", tag_, end, net);
  }
  void SetLink(int net, const char* state) {
    EXPECT_EQ(Ip({"-n", server_ns(), "link", "set", Veth(net, "s"), state}),
              "");
    EXPECT_EQ(Ip({"-n", net == 1 ? ns_a() : ns_b(), "link", "set",
                  Veth(net, "c"), state}),
              "");
  }
  // Ip runs `ip args...`; returns "" on success, else what went wrong.
  std::string Ip(std::vector<std::string> args) {
    args.insert(args.begin(), ip_);
    std::string out, err;
    const int code = RunProcess(args, &out, &err);
    if (code == 0) return "";
    std::string command;
    for (const std::string& a : args) absl::StrAppend(&command, a, " ");
    return absl::StrCat(command, "failed (", code, "): ", err);
  }

  const std::string ip_;
  const std::string tag_;
};

class NetworkCutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = netns_.Setup(); !why.empty()) {
      GTEST_SKIP() << "network namespaces unavailable: " << why;
    }
  }

  // StartCluster starts the server in its namespace with `flags`.
  void StartCluster(std::vector<std::string> flags) {
    ClusterOptions options;
    options.server_names = {"localhost", "127.0.0.1", "10.201.1.1",
                            "10.201.2.1"};
    cluster_ = std::make_unique<FaultCluster>(
        3, std::move(flags), options,
        ServerPlacement{netns_.In(netns_.server_ns()), "0.0.0.0"});
  }

  // Join starts `site` in its namespace: site-2 (site 1) behind link 2.
  Participant& Join(int site, size_t size, uint32_t seed) {
    const int net = site == 1 ? 2 : 1;
    return cluster_->Join(
        site, size, seed,
        absl::StrCat("10.201.", net, ".1:", cluster_->server().port()),
        netns_.In(net == 1 ? netns_.ns_a() : netns_.ns_b()));
  }

  // The three sites of a cut case; site-2 uploads 64 MiB.
  struct CutRound {
    Participant* a;
    Participant* site2;
    Participant* c;
    absl::Time cut;  // when link 2 went down
  };

  // CutSite2MidUpload starts the three sites (seeds seed..seed+2) into
  // `round`, waits until site-2's upload has begun and cuts link 2.
  void CutSite2MidUpload(uint32_t seed, CutRound* round) {
    round->a = &Join(0, 4096, seed);
    round->site2 = &Join(1, 64 * kMiB, seed + 1);
    round->c = &Join(2, 4096, seed + 2);
    ASSERT_TRUE(cluster_->WaitForEvent("contribution_started", {{"rank", 1}},
                                       absl::Seconds(60)))
        << cluster_->server().Log();
    netns_.Cut(2);
    round->cut = absl::Now();
  }

  void ExpectNextRoundWorks(uint32_t seed) {
    std::vector<Participant*> round;
    for (int site = 0; site < 3; ++site) {
      round.push_back(&Join(site, 4096 + site, seed + site));
    }
    for (Participant* p : round) {
      EXPECT_EQ(cluster_->Exit(*p, absl::Seconds(60)), 0) << cluster_->Log(*p);
    }
    for (Participant* p : round) {
      cluster_->ExpectGathered(*p, {round[0], round[1], round[2]});
    }
  }

  Netns netns_;
  std::unique_ptr<FaultCluster> cluster_;
};

TEST_F(NetworkCutTest, ACutShorterThanTheHeartbeatTimeoutHeals) {
  StartCluster({"--heartbeat-timeout", "10"});
  CutRound round;
  ASSERT_NO_FATAL_FAILURE(CutSite2MidUpload(1, &round));
  Participant &a = *round.a, &site2 = *round.site2, &c = *round.c;
  // The cut lasts 2 s (time passing is what is tested: shorter than the
  // heartbeat timeout).
  absl::SleepFor(absl::Seconds(2));
  netns_.Restore(2);
  const absl::Duration bound = absl::Seconds(60);
  for (Participant* p : {&a, &site2, &c}) {
    EXPECT_EQ(cluster_->Exit(*p, bound), 0) << cluster_->Log(*p);
  }
  ReportFault("network cut 2 s mid-upload (heals)", bound,
              SecondsSince(round.cut));
  EXPECT_EQ(cluster_->CountEvents("contribution_complete", {{"rank", 1}}), 1);
  for (Participant* p : {&a, &site2, &c}) {
    cluster_->ExpectGathered(*p, {&a, &site2, &c});
  }
  ExpectNextRoundWorks(10);
  cluster_->StopAndVerifyAudit();
}

TEST_F(NetworkCutTest, ALongCutLosesTheSiteAndTheOthersFailNamingIt) {
  StartCluster({});
  CutRound round;
  ASSERT_NO_FATAL_FAILURE(CutSite2MidUpload(21, &round));
  Participant &a = *round.a, &site2 = *round.site2, &c = *round.c;
  const absl::Duration bound = kHeartbeatTimeout + absl::Seconds(10);
  for (Participant* p : {&a, &c}) {
    EXPECT_EQ(cluster_->Exit(*p, bound), 1) << cluster_->Log(*p);
    EXPECT_THAT(cluster_->Log(*p),
                HasSubstr("rank 1 (spiffe://fedgather/site-2) sent no "
                          "heartbeat"));
  }
  ReportFault("network cut mid-upload (lost)", bound, SecondsSince(round.cut));
  EXPECT_EQ(cluster_->CountEvents("contribution_complete", {{"rank", 1}}), 0)
      << "site-2's upload ended before the cut: not mid-round";
  netns_.Restore(2);
  // Back online, site-2 learns its epoch is over and exits with an error.
  EXPECT_EQ(cluster_->Exit(site2, absl::Seconds(60)), 1)
      << cluster_->Log(site2);
  ExpectNextRoundWorks(30);
  cluster_->StopAndVerifyAudit();
}

}  // namespace
}  // namespace fedgather::testing
