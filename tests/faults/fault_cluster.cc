#include "tests/faults/fault_cluster.h"

#include <grpcpp/create_channel.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <iostream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/provision.h"
#include "common/file_io.h"
#include "common/safetensors.h"
#include "common/tls_credentials.h"
#include "tests/common/subprocess.h"

namespace fedgather::testing {
namespace {

std::string SecondsFlag(absl::Duration d) {
  return absl::StrCat(absl::ToDoubleSeconds(d));
}

ClusterOptions WithProcessServer(int world, ClusterOptions options) {
  options.participants = world;
  options.in_process_server = false;
  options.audit = true;
  return options;
}

bool Matches(const nlohmann::json& event, const std::string& name,
             const nlohmann::json& match) {
  if (event["event"] != name) return false;
  for (const auto& [key, value] : match.items()) {
    if (!event.contains(key) || event[key] != value) return false;
  }
  return true;
}

std::vector<std::string> ServerFlags(const TestCluster& cluster,
                                     std::vector<std::string> extra) {
  const std::vector<std::string> defaults = {
      "--audit-log",           cluster.audit_path(),
      "--state-dir",           cluster.dir() + "/state",
      "--heartbeat-interval",  SecondsFlag(kHeartbeatInterval),
      "--heartbeat-timeout",   SecondsFlag(kHeartbeatTimeout),
      "--resume-grace",        SecondsFlag(kResumeGrace),
      "--first-frame-timeout", SecondsFlag(kFirstFrameTimeout),
      "--round-timeout",       "60",
      "--join-timeout",        "60",
      "--log-format",          "json"};
  std::vector<std::string> flags = extra;
  for (size_t i = 0; i + 1 < defaults.size(); i += 2) {
    if (std::find(extra.begin(), extra.end(), defaults[i]) == extra.end()) {
      flags.push_back(defaults[i]);
      flags.push_back(defaults[i + 1]);
    }
  }
  return flags;
}

}  // namespace

double SecondsSince(absl::Time start) {
  return absl::ToDoubleSeconds(absl::Now() - start);
}

std::string JoinErrorLine(const std::string& log) {
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StartsWith(line, "fedgather join: ")) return std::string(line);
  }
  return "";
}

void ReportFault(const std::string& fault, absl::Duration bound,
                 double observed) {
  std::cout << "FAULT " << fault << ": bound " << bound << ", observed "
            << observed << " s" << std::endl;
}

FaultCluster::FaultCluster(int world, std::vector<std::string> server_flags,
                           ClusterOptions options, ServerPlacement placement)
    : world_(world),
      cluster_(WithProcessServer(world, std::move(options))),
      server_(cluster_, ServerFlags(cluster_, std::move(server_flags)),
              std::move(placement.launcher), std::move(placement.host)) {
  server_.Start(0);
}

FaultCluster::~FaultCluster() {
  for (const auto& p : participants_) {
    if (p->exit_code >= 0 || p->pid <= 0) continue;
    ::kill(p->pid, SIGKILL);
    WaitProcess(p->pid);
  }
}

Participant& FaultCluster::Join(int site, size_t size, uint32_t seed,
                                const std::string& server,
                                const std::vector<std::string>& launcher,
                                const std::vector<std::string>& flags) {
  auto p = std::make_unique<Participant>();
  p->site = site;
  const std::vector<uint8_t> bytes = RandomBytes(size, seed);
  p->bytes.assign(bytes.begin(), bytes.end());
  const std::string stem =
      absl::StrCat(cluster_.dir(), "/p", participants_.size(), "-site", site);
  p->input = stem + ".in";
  p->output = stem + ".out.safetensors";
  p->log = stem + ".log";
  EXPECT_TRUE(WriteStringToFile(p->input, p->bytes).ok());
  std::vector<std::string> argv = launcher;
  for (const std::string& arg : std::vector<std::string>{
           FEDGATHER_CLI_PATH, "join", "--server",
           server.empty() ? server_.address() : server, "--tls-dir",
           cluster_.dir() + "/" + TestCluster::Site(site), "--group", "demo",
           "--world-size", std::to_string(world_), "--op", "all_gather_bytes",
           "--input", p->input, "--output", p->output, "--timeout", "60"}) {
    argv.push_back(arg);
  }
  argv.insert(argv.end(), flags.begin(), flags.end());
  p->pid = SpawnProcess(std::move(argv), p->log, p->log, /*append=*/true);
  participants_.push_back(std::move(p));
  return *participants_.back();
}

int FaultCluster::Exit(Participant& p, absl::Duration bound) {
  p.exit_code = WaitProcessFor(p.pid, bound);
  if (p.exit_code < 0) {
    ADD_FAILURE() << TestCluster::Site(p.site) << " still runs after " << bound
                  << " (hangs); it printed: " << Log(p)
                  << "\nthe server's log:\n"
                  << server_.Log();
    ::kill(p.pid, SIGKILL);
    WaitProcess(p.pid);
    p.exit_code = 128 + SIGKILL;
    return -1;
  }
  return p.exit_code;
}

std::string FaultCluster::Log(const Participant& p) const {
  return ReadFileToString(p.log).value_or("");
}

bool FaultCluster::ExpectGathered(
    const Participant& p, const std::vector<const Participant*>& all) const {
  absl::StatusOr<SafetensorsFile> out = SafetensorsFile::ReadFile(p.output);
  if (!out.ok()) {
    ADD_FAILURE() << TestCluster::Site(p.site) << ": " << out.status()
                  << "; it printed: " << Log(p);
    return false;
  }
  if (out->tensors().size() != all.size()) {
    ADD_FAILURE() << TestCluster::Site(p.site) << " received "
                  << out->tensors().size() << " tensors, not " << all.size();
    return false;
  }
  bool gathered = true;
  for (const Participant* from : all) {
    const std::string name = absl::StrCat("bytes.", from->site);
    const SafetensorsEntry* entry = nullptr;
    for (const SafetensorsEntry& e : out->tensors()) {
      if (e.spec.name == name) entry = &e;
    }
    if (entry == nullptr) {
      ADD_FAILURE() << TestCluster::Site(p.site) << " received no " << name;
      gathered = false;
      continue;
    }
    const bool same =
        std::string(entry->data.begin(), entry->data.end()) == from->bytes;
    EXPECT_TRUE(same) << TestCluster::Site(p.site) << "'s output differs from "
                      << TestCluster::Site(from->site) << "'s "
                      << from->bytes.size() << " bytes";
    const std::string rank_key = absl::StrCat("fedgather.rank.", from->site);
    const auto identity = out->metadata().find(rank_key);
    const bool named =
        identity != out->metadata().end() &&
        identity->second == ParticipantIdentity(TestCluster::Site(from->site));
    EXPECT_TRUE(named) << TestCluster::Site(p.site) << "'s " << rank_key;
    gathered = gathered && same && named;
  }
  return gathered;
}

std::unique_ptr<v1::Rendezvous::Stub> FaultCluster::StubFor(
    const std::string& name) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return v1::Rendezvous::NewStub(grpc::CreateCustomChannel(
      server_.address(), MakeChannelCredentials(cluster_.TlsFor(name)), args));
}

std::vector<nlohmann::json> FaultCluster::ServerEvents() const {
  std::vector<nlohmann::json> events;
  std::istringstream lines(server_.Log());
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json parsed = nlohmann::json::parse(line, nullptr, false);
    if (!parsed.is_discarded() && parsed.contains("event")) {
      events.push_back(std::move(parsed));
    }
  }
  return events;
}

std::optional<nlohmann::json> FaultCluster::WaitForEvent(
    const std::string& name, const nlohmann::json& match,
    absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  do {
    for (const nlohmann::json& e : ServerEvents()) {
      if (Matches(e, name, match)) return e;
    }
    absl::SleepFor(absl::Milliseconds(5));
  } while (absl::Now() < deadline);
  return std::nullopt;
}

int FaultCluster::CountEvents(const std::string& name,
                              const nlohmann::json& match) const {
  int count = 0;
  for (const nlohmann::json& e : ServerEvents())
    count += Matches(e, name, match);
  return count;
}

std::string FaultCluster::DataPlaneChosen() const {
  for (const nlohmann::json& event : ServerEvents()) {
    if (event.value("event", "") == "data_plane_chosen" &&
        event.contains("details")) {
      return event["details"].value("data_plane", "");
    }
  }
  return "";
}

bool FaultCluster::ExpectNextRoundWorks(uint32_t seed) {
  std::vector<Participant*> round;
  for (int site = 0; site < world_; ++site) {
    round.push_back(&Join(site, 4096 + 100 * site, seed + site));
  }
  std::vector<const Participant*> all(round.begin(), round.end());
  bool worked = true;
  for (Participant* p : round) {
    const int code = Exit(*p, absl::Seconds(60));
    EXPECT_EQ(code, 0) << Log(*p);
    worked = worked && code == 0;
  }
  for (Participant* p : round) worked = ExpectGathered(*p, all) && worked;
  return worked;
}

void FaultCluster::StopAndVerifyAudit() {
  EXPECT_EQ(server_.Stop(absl::Seconds(30)), 0) << server_.Log();
  std::string out, err;
  const int verified =
      RunProcess({FEDGATHER_CLI_PATH, "audit", "verify", "--cert",
                  cluster_.dir() + "/server/cert.pem", cluster_.audit_path()},
                 &out, &err);
  EXPECT_EQ(verified, 0) << out << err;
}

}  // namespace fedgather::testing
