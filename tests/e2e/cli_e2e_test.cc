// The `fedgather` CLI as real processes against a real server over mutual
// TLS: a 4-participant all_gather checked byte for byte, a participant killed
// with SIGKILL mid-upload, and the admin commands.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/provision.h"
#include "common/file_io.h"
#include "common/safetensors.h"
#include "tests/common/subprocess.h"
#include "tests/e2e/test_cluster.h"

extern char** environ;

namespace fedgather::testing {
namespace {

using ::testing::HasSubstr;

// Starts the `fedgather` CLI with `args`; returns its pid. Non-empty paths
// receive the process's stdout and stderr; `env` ("NAME=VALUE") is added to
// its environment.
pid_t StartCli(std::vector<std::string> args,
               const std::string& stdout_path = "",
               const std::string& stderr_path = "",
               const std::vector<std::string>& env = {}) {
  args.insert(args.begin(), FEDGATHER_CLI_PATH);
  if (!env.empty()) {
    args.insert(args.begin(), env.begin(), env.end());
    args.insert(args.begin(), "/usr/bin/env");
  }
  return SpawnProcess(std::move(args), stdout_path, stderr_path);
}

// Starts `fedgather join` for `site`; returns its pid. With `stderr_path`
// set, the process's stderr goes to that file.
// `extra` arguments are appended.
pid_t StartJoin(const TestCluster& cluster, int site, int world,
                const std::string& input, const std::string& output,
                const std::string& stderr_path = "",
                const std::vector<std::string>& extra = {},
                const std::vector<std::string>& env = {}) {
  std::vector<std::string> args = {
      "join",
      "--server",
      cluster.address(),
      "--tls-dir",
      cluster.dir() + "/" + TestCluster::Site(site),
      "--group",
      "demo",
      "--world-size",
      std::to_string(world),
      "--input",
      input,
      "--output",
      output,
      "--timeout",
      "60"};
  args.insert(args.end(), extra.begin(), extra.end());
  return StartCli(std::move(args), "", stderr_path, env);
}

int WaitExit(pid_t pid) { return WaitProcess(pid); }

struct CliResult {
  int exit_code;
  std::string out;
  std::string err;
};

// RunCli runs the CLI with `args` to completion.
CliResult RunCli(const TestCluster& cluster, std::vector<std::string> args) {
  const std::string out = cluster.dir() + "/cli.out";
  const std::string err = cluster.dir() + "/cli.err";
  const int code = WaitExit(StartCli(std::move(args), out, err));
  return {code, ReadFileToString(out).value_or(""),
          ReadFileToString(err).value_or("")};
}

std::string WriteInput(const TestCluster& cluster, int site,
                       const std::vector<TensorSpec>& specs,
                       std::vector<std::vector<uint8_t>>* bytes) {
  std::vector<ConstHostTensor> views;
  for (size_t t = 0; t < specs.size(); ++t) {
    bytes->push_back(RandomBytes(ByteSize(specs[t]).value(), site * 31 + t));
  }
  for (size_t t = 0; t < specs.size(); ++t) {
    views.push_back({specs[t], bytes->at(t).data()});
  }
  const std::string path =
      absl::StrCat(cluster.dir(), "/in-", site, ".safetensors");
  EXPECT_TRUE(WriteSafetensorsFile(path, views, {}).ok());
  return path;
}

TEST(CliTest, AdminCommandsStatusRevokeReloadAndAbort) {
  ClusterOptions options(2);
  options.observers = {"dashboard"};
  options.admins = {"ops"};
  options.crl = true;
  TestCluster cluster(options);
  auto as = [&](const std::string& name) {
    return std::vector<std::string>{"--server", cluster.address(), "--tls-dir",
                                    cluster.dir() + "/" + name};
  };
  auto with = [](std::vector<std::string> head,
                 const std::vector<std::string>& tail) {
    head.insert(head.begin(), tail.begin(), tail.end());
    return head;
  };
  // The observer reads the status as JSON.
  CliResult status =
      RunCli(cluster, with(as("dashboard"), {"status", "--json"}));
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr("\"role\": \"observer\""));
  EXPECT_THAT(status.out, HasSubstr("\"name\": \"demo\""));
  // It may not abort a round; the admin may (there is none in flight).
  CliResult denied = RunCli(
      cluster, with(as("dashboard"), {"round", "abort", "--group", "demo"}));
  EXPECT_EQ(denied.exit_code, 1);
  EXPECT_THAT(denied.err, HasSubstr("PERMISSION_DENIED"));
  CliResult aborted = RunCli(
      cluster, with(as("ops"),
                    {"round", "abort", "--group", "demo", "--reason", "test"}));
  EXPECT_EQ(aborted.exit_code, 0) << aborted.err;
  EXPECT_THAT(aborted.out, HasSubstr("aborted 0 round(s) of group demo"));
  // Revoke site-2, reload as the admin: site-2 is refused, site-1 is not.
  CliResult revoked = RunCli(cluster, {"revoke", "--ca-dir", cluster.dir(),
                                       "--crl", cluster.dir() + "/crl.pem",
                                       cluster.dir() + "/site-2/cert.pem"});
  EXPECT_EQ(revoked.exit_code, 0) << revoked.err;
  CliResult reload = RunCli(cluster, with(as("ops"), {"policy", "reload"}));
  EXPECT_EQ(reload.exit_code, 0) << reload.err;
  EXPECT_THAT(reload.out, HasSubstr("policy reloaded: 1 group(s)"));
  CliResult refused = RunCli(cluster, with(as("site-2"), {"status"}));
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("UNAUTHENTICATED"));
  EXPECT_THAT(refused.err, HasSubstr("was revoked"));
  CliResult allowed = RunCli(cluster, with(as("site-1"), {"status"}));
  EXPECT_EQ(allowed.exit_code, 0) << allowed.err;
  EXPECT_THAT(allowed.out, HasSubstr("group demo (your role: participant)"));
  EXPECT_THAT(allowed.out, HasSubstr("not formed, digest blake3"));
}

// Runs `fedgather join --op OP --rank i` for sites 0..world-1 on `inputs`
// and returns each output file.
std::vector<SafetensorsFile> JoinAll(const TestCluster& cluster, int world,
                                     const std::vector<std::string>& inputs,
                                     const std::vector<std::string>& op_args) {
  std::vector<pid_t> pids;
  for (int i = 0; i < world; ++i) {
    std::vector<std::string> extra = op_args;
    extra.insert(extra.end(), {"--rank", std::to_string(i)});
    pids.push_back(StartJoin(
        cluster, i, world, inputs[i],
        absl::StrCat(cluster.dir(), "/out-", i, ".safetensors"), "", extra));
  }
  for (pid_t pid : pids) EXPECT_EQ(WaitExit(pid), 0);
  std::vector<SafetensorsFile> outputs;
  for (int i = 0; i < world; ++i) {
    auto out = SafetensorsFile::ReadFile(
        absl::StrCat(cluster.dir(), "/out-", i, ".safetensors"));
    EXPECT_TRUE(out.ok()) << out.status();
    if (out.ok()) outputs.push_back(*std::move(out));
  }
  return outputs;
}

TEST(CliTest, HealthSaysServingUntilTheServerStops) {
  TestCluster cluster(2);
  const std::vector<std::string> health = {
      "health",
      "--server",
      cluster.address(),
      "--tls-dir",
      cluster.dir() + "/" + TestCluster::Site(0),
      "--timeout",
      "10"};
  CliResult serving = RunCli(cluster, health);
  EXPECT_EQ(serving.exit_code, 0) << serving.err;
  EXPECT_EQ(serving.out, "SERVING\n");
  // The server's own certificate is enough, as a container probe uses it.
  std::vector<std::string> as_server = health;
  as_server[4] = cluster.dir() + "/server";
  CliResult probe = RunCli(cluster, as_server);
  EXPECT_EQ(probe.exit_code, 0) << probe.err;
  // A certificate of another CA (with this federation's ca.pem): the
  // server's handshake refuses it, and the probe says so at once.
  TestCluster other(2);
  const std::string stranger = cluster.dir() + "/stranger";
  const std::string from = other.dir() + "/" + TestCluster::Site(0);
  ASSERT_TRUE(MakeDirectories(stranger, 0755).ok());
  for (const char* file : {"/cert.pem", "/key.pem"}) {
    ASSERT_TRUE(WriteStringToFile(stranger + file,
                                  ReadFileToString(from + file).value(), 0600)
                    .ok());
  }
  ASSERT_TRUE(
      WriteStringToFile(stranger + "/ca.pem",
                        ReadFileToString(cluster.dir() + "/ca.pem").value())
          .ok());
  std::vector<std::string> as_stranger = health;
  as_stranger[4] = stranger;
  CliResult refused = RunCli(cluster, as_stranger);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err,
              HasSubstr("fedgather health: UNAUTHENTICATED: health check of " +
                        cluster.address() +
                        ": this client's certificate cannot pass the TLS "
                        "handshake of the server"));
  EXPECT_THAT(refused.err, HasSubstr("is not issued by the CA in this "
                                     "client's ca.pem"));

  cluster.StopServer();
  CliResult stopped = RunCli(cluster, health);
  EXPECT_EQ(stopped.exit_code, 1);
  EXPECT_THAT(stopped.err, HasSubstr("fedgather health: UNAVAILABLE: health "
                                     "check of " +
                                     cluster.address()));
}

TEST(CliTest, StatusShowsARoundWithOneMemberMissing) {
  ClusterOptions options(2);
  options.observers = {"dashboard"};
  TestCluster cluster(options);
  Members members(cluster);
  constexpr int64_t kBytes = 1 << 20;
  std::vector<uint8_t> in(kBytes, 7), out(2 * kBytes);
  auto gather = [&](int r) {
    const ConstHostTensor input{{"w", DType::kU8, {kBytes}}, in.data()};
    const MutableHostTensor output{{"w", DType::kU8, {2, kBytes}}, out.data()};
    return members.groups[r]->AllGatherInto({&input, 1}, {&output, 1});
  };
  absl::Status zero;
  std::thread rank_zero([&] { zero = gather(0); });
  ASSERT_TRUE(cluster.events().WaitFor(
      [](const server::ServerEvent& e) {
        return e.kind == server::EventKind::kContributionComplete;
      },
      absl::Seconds(30)));
  const std::vector<std::string> status = {"status", "--server",
                                           cluster.address(), "--tls-dir",
                                           cluster.dir() + "/dashboard"};
  std::vector<std::string> as_json = status;
  as_json.push_back("--json");
  CliResult json = RunCli(cluster, as_json);
  CliResult table = RunCli(cluster, status);
  EXPECT_TRUE(gather(1).ok());
  rank_zero.join();
  EXPECT_TRUE(zero.ok()) << zero;

  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json reply = nlohmann::json::parse(json.out);
  const nlohmann::json& group = reply["groups"][0];
  EXPECT_EQ(group["name"], "demo");
  EXPECT_EQ(group["members"][0]["connected"], true);
  EXPECT_EQ(group["members"][1]["connected"], true);
  ASSERT_EQ(group["rounds"].size(), 1u);
  const nlohmann::json& round = group["rounds"][0];
  EXPECT_EQ(round["complete_ranks"], nlohmann::json::array({0}));
  EXPECT_EQ(round["started_ranks"], nlohmann::json::array({0}));
  // uint64 fields are JSON strings in protobuf's mapping.
  EXPECT_EQ(round["bytes_in"], nlohmann::json::array({"1048576", "0"}));
  EXPECT_GT(std::stoll(round["deadline_in_ms"].get<std::string>()), 0);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("round seq 0: 1 of 2 contributed"));
  EXPECT_THAT(table.out, ::testing::ContainsRegex(
                             "1 +spiffe://fedgather/site-2 +missing"));
  EXPECT_THAT(table.out,
              ::testing::ContainsRegex(
                  "0 +spiffe://fedgather/site-1 +contributed +1.0 MiB"));
}

TEST(CliTest, BroadcastAllGatherVAllReduceAndBytesOps) {
  TestCluster cluster(ClusterOptions(3));
  // broadcast --root 2: every output holds site 3's tensors.
  std::vector<std::vector<std::vector<uint8_t>>> bytes(3);
  std::vector<std::string> inputs;
  for (int i = 0; i < 3; ++i) {
    inputs.push_back(WriteInput(
        cluster, i, {{"w", DType::kF32, {5, 3}}, {"b", DType::kI64, {2}}},
        &bytes[i]));
  }
  for (const SafetensorsFile& out :
       JoinAll(cluster, 3, inputs, {"--op", "broadcast", "--root", "2"})) {
    ASSERT_EQ(out.tensors().size(), 2u);
    EXPECT_EQ(out.metadata().at("fedgather.op"), "broadcast");
    for (const SafetensorsEntry& entry : out.tensors()) {
      const int t = entry.spec.name == "w" ? 0 : 1;
      EXPECT_EQ(entry.spec.shape, (t == 0 ? std::vector<int64_t>{5, 3}
                                          : std::vector<int64_t>{2}));
      EXPECT_EQ(std::vector<uint8_t>(entry.data.begin(), entry.data.end()),
                bytes[2][t]);
    }
  }
  // all_gather_v: rank i sends i + 1 rows; the output joins them exactly.
  std::vector<std::vector<std::vector<uint8_t>>> rows(3);
  inputs.clear();
  for (int i = 0; i < 3; ++i) {
    inputs.push_back(
        WriteInput(cluster, i, {{"x", DType::kI32, {i + 1, 2}}}, &rows[i]));
  }
  std::vector<uint8_t> joined;
  for (int i = 0; i < 3; ++i) {
    joined.insert(joined.end(), rows[i][0].begin(), rows[i][0].end());
  }
  for (const SafetensorsFile& out :
       JoinAll(cluster, 3, inputs, {"--op", "all_gather_v"})) {
    ASSERT_EQ(out.tensors().size(), 1u);
    EXPECT_EQ(out.tensors()[0].spec.shape, (std::vector<int64_t>{6, 2}));
    EXPECT_EQ(out.metadata().at("fedgather.split.x"), "1,2,3");
    EXPECT_EQ(std::vector<uint8_t>(out.tensors()[0].data.begin(),
                                   out.tensors()[0].data.end()),
              joined);
  }
  // all_reduce --reduce weighted_mean --weight W: site i holds x = i + 1
  // everywhere and weighs 10 * (i + 1), so the result is sum(w x) / sum(w).
  inputs.clear();
  std::vector<std::vector<double>> values(3);
  for (int i = 0; i < 3; ++i) {
    values[i].assign(4, i + 1.0);
    inputs.push_back(absl::StrCat(cluster.dir(), "/reduce-", i, ".st"));
    const ConstHostTensor view{{"w", DType::kF64, {4}}, values[i].data()};
    ASSERT_TRUE(WriteSafetensorsFile(inputs.back(), {&view, 1}, {}).ok());
  }
  std::vector<pid_t> pids;
  for (int i = 0; i < 3; ++i) {
    pids.push_back(StartJoin(
        cluster, i, 3, inputs[i],
        absl::StrCat(cluster.dir(), "/out-", i, ".safetensors"), "",
        {"--op", "all_reduce", "--reduce", "weighted_mean", "--weight",
         std::to_string(10 * (i + 1)), "--rank", std::to_string(i)}));
  }
  for (pid_t pid : pids) EXPECT_EQ(WaitExit(pid), 0);
  const double want = (10 * 1 + 20 * 2 + 30 * 3) / 60.0;
  for (int i = 0; i < 3; ++i) {
    auto out = SafetensorsFile::ReadFile(
        absl::StrCat(cluster.dir(), "/out-", i, ".safetensors"));
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->tensors().size(), 1u);
    EXPECT_EQ(out->tensors()[0].spec.shape, (std::vector<int64_t>{4}));
    std::vector<double> got(4);
    std::memcpy(got.data(), out->tensors()[0].data.data(), 32);
    for (double g : got) EXPECT_NEAR(g, want, 1e-12);
  }
  // all_gather_bytes: any file; the output holds every rank's bytes.
  inputs.clear();
  std::vector<std::string> blobs;
  for (int i = 0; i < 3; ++i) {
    blobs.push_back(std::string(i * 10, static_cast<char>('a' + i)));
    inputs.push_back(absl::StrCat(cluster.dir(), "/blob-", i));
    ASSERT_TRUE(WriteStringToFile(inputs.back(), blobs.back()).ok());
  }
  for (const SafetensorsFile& out :
       JoinAll(cluster, 3, inputs, {"--op", "all_gather_bytes"})) {
    ASSERT_EQ(out.tensors().size(), 3u);
    for (const SafetensorsEntry& entry : out.tensors()) {
      const int r = entry.spec.name.back() - '0';
      EXPECT_EQ(std::string(entry.data.begin(), entry.data.end()), blobs[r]);
    }
  }
}

TEST(CliTest, ProgressOffATerminalIsPeriodicLinesAndQuietIsSilent) {
  TestCluster cluster(ClusterOptions(2));
  constexpr int64_t kBytes = 1 << 20;
  const std::vector<TensorSpec> specs = {{"w", DType::kU8, {kBytes}}};
  std::vector<std::vector<uint8_t>> in0;
  const std::string input0 = WriteInput(cluster, 0, specs, &in0);
  // `fedgather join` is rank 0; rank 1, in this process, joins at once but
  // contributes only once rank 0 has reported its progress (every 2 s), so
  // rank 0 waits in its round; with --quiet, once a report period and more
  // have passed without one (time passing is what is tested). Returns rank
  // 0's stderr.
  auto run = [&](const std::vector<std::string>& extra, bool reports) {
    const std::string err = cluster.dir() + "/join-0.err";
    const pid_t zero =
        StartJoin(cluster, 0, 2, input0, cluster.dir() + "/out-0.safetensors",
                  err, extra);
    std::unique_ptr<Client> client = cluster.Connect(TestCluster::Site(1));
    auto group = client->Join({"demo", 2, 1, absl::Seconds(30)});
    EXPECT_TRUE(group.ok()) << group.status();
    if (reports) {
      const absl::Time give_up = absl::Now() + absl::Seconds(30);
      while (ReadFileToString(err).value_or("").find("not started\n") ==
                 std::string::npos &&
             absl::Now() < give_up) {
        absl::SleepFor(absl::Milliseconds(50));
      }
    } else {
      absl::SleepFor(absl::Seconds(3));
    }
    std::vector<uint8_t> in(kBytes, 1), out(2 * kBytes);
    const ConstHostTensor input{specs[0], in.data()};
    const MutableHostTensor output{{"w", DType::kU8, {2, kBytes}}, out.data()};
    if (group.ok()) {
      EXPECT_TRUE((*group)->AllGatherInto({&input, 1}, {&output, 1}).ok());
    }
    EXPECT_EQ(WaitExit(zero), 0) << ReadFileToString(err).value_or("");
    return ReadFileToString(err).value_or("?");
  };
  // Every 2 s off a terminal: the bytes so far and who has not started.
  const std::string report = run({}, true);
  EXPECT_THAT(report, ::testing::ContainsRegex(
                          "progress: up [0-9.]+/1.0 MiB, down 0.0/1.0 MiB"));
  EXPECT_THAT(report, HasSubstr(", 1 rank(s) not started\n"));
  EXPECT_EQ(report.find('\r'), std::string::npos);  // no bar off a terminal
  // --quiet prints nothing at all on success.
  EXPECT_EQ(run({"--quiet"}, false), "");
}

TEST(CliTest, FourParticipantsGatherTheirFiles) {
  TestCluster cluster(ClusterOptions(4));
  const std::vector<TensorSpec> specs = {
      {"layer.weight", DType::kF32, {64, 33}},
      {"layer.bias", DType::kF16, {33}},
      {"steps", DType::kI64, {}}};
  std::vector<std::vector<std::vector<uint8_t>>> inputs(4);
  std::vector<pid_t> pids;
  for (int i = 0; i < 4; ++i) {
    const std::string in = WriteInput(cluster, i, specs, &inputs[i]);
    pids.push_back(
        StartJoin(cluster, i, 4, in,
                  absl::StrCat(cluster.dir(), "/out-", i, ".safetensors")));
  }
  for (pid_t pid : pids) EXPECT_EQ(WaitExit(pid), 0);

  for (int i = 0; i < 4; ++i) {
    auto out = SafetensorsFile::ReadFile(
        absl::StrCat(cluster.dir(), "/out-", i, ".safetensors"));
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->tensors().size(), specs.size());
    for (const SafetensorsEntry& entry : out->tensors()) {
      size_t t = 0;
      while (specs[t].name != entry.spec.name) ++t;
      std::vector<int64_t> shape = specs[t].shape;
      shape.insert(shape.begin(), 4);
      EXPECT_EQ(entry.spec.shape, shape);
      const size_t part = ByteSize(specs[t]).value();
      for (int r = 0; r < 4; ++r) {
        const std::string& identity =
            out->metadata().at(absl::StrCat("fedgather.rank.", r));
        int site = 0;
        while (ParticipantIdentity(TestCluster::Site(site)) != identity) ++site;
        EXPECT_EQ(0, std::memcmp(entry.data.data() + r * part,
                                 inputs[site][t].data(), part))
            << "output " << i << " tensor " << entry.spec.name << " rank " << r;
      }
    }
  }
}

TEST(CliTest, ParticipantKilledMidUploadFailsTheOthersNamingIt) {
  ClusterOptions options{3};
  options.limits.round_timeout = absl::Seconds(120);
  options.limits.max_buffered_bytes_per_round = 1 << 20;  // stall the upload
  TestCluster cluster(options);
  // site-2 is a CLI process with 32 MiB to send; site-1 and site-3 are here.
  std::vector<std::vector<uint8_t>> bytes;
  const std::string in =
      WriteInput(cluster, 1, {{"big", DType::kU8, {32 << 20}}}, &bytes);
  const pid_t victim = StartJoin(cluster, 1, 3, in, cluster.dir() + "/out.st");
  std::vector<std::unique_ptr<Client>> clients(3);
  std::vector<std::unique_ptr<Group>> groups(3);
  RunRanks(3, [&](int i) {
    if (i == 1) return;
    clients[i] = cluster.Connect(TestCluster::Site(i));
    auto group = clients[i]->Join({"demo", 3, std::nullopt, absl::Seconds(60)});
    ASSERT_TRUE(group.ok()) << group.status();
    groups[i] = *std::move(group);
  });
  ASSERT_TRUE(groups[0] && groups[2]);
  std::vector<uint8_t> mine(32 << 20, 1);
  std::vector<uint8_t> out(3 * mine.size());
  ConstHostTensor input{{"big", DType::kU8, {32 << 20}}, mine.data()};
  MutableHostTensor output{{"big", DType::kU8, {3, 32 << 20}}, out.data()};
  absl::Status first;
  std::thread rank_a([&] {
    first = groups[0]->AllGatherInto({&input, 1}, {&output, 1});
  });
  // Kill the CLI once its upload has started; it cannot finish, because
  // site-3 is not receiving yet and the round buffer holds only 1 MiB.
  // Ranks follow sorted identities: site-2 is rank 1.
  const int victim_rank = 1;
  ASSERT_EQ(groups[0]->identities()[victim_rank],
            ParticipantIdentity("site-2"));
  ASSERT_TRUE(cluster.events().WaitFor(
      [&](const server::ServerEvent& e) {
        return e.kind == server::EventKind::kContributionStarted &&
               e.rank == victim_rank;
      },
      absl::Seconds(60)));
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  EXPECT_EQ(WaitExit(victim), 128 + SIGKILL);
  rank_a.join();
  std::vector<uint8_t> out_b(3 * mine.size());
  MutableHostTensor output_b{{"big", DType::kU8, {3, 32 << 20}}, out_b.data()};
  const absl::Status second =
      groups[2]->AllGatherInto({&input, 1}, {&output_b, 1});
  const std::string culprit =
      absl::StrCat("rank ", victim_rank, " (spiffe://fedgather/site-2)");
  for (const absl::Status& s : {first, second}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(culprit));
  }
}

TEST(CliTest, TruncatedInputFileIsRefusedBeforeJoining) {
  TestCluster cluster(ClusterOptions(2));
  std::vector<std::vector<uint8_t>> bytes;
  const std::string in =
      WriteInput(cluster, 0, {{"w", DType::kF32, {64}}}, &bytes);
  absl::StatusOr<std::string> whole = ReadFileToString(in);
  ASSERT_TRUE(whole.ok());
  ASSERT_TRUE(WriteStringToFile(in, whole->substr(0, whole->size() - 10)).ok());
  const std::string err = cluster.dir() + "/err.txt";
  EXPECT_EQ(WaitExit(StartJoin(cluster, 0, 2, in, cluster.dir() + "/o", err)),
            1);
  absl::StatusOr<std::string> message = ReadFileToString(err);
  ASSERT_TRUE(message.ok());
  EXPECT_THAT(*message, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(*message, HasSubstr(in));
}

TEST(CliTest, PeerListenOffersAnEndpointTheServerChecks) {
  ClusterOptions options(2);
  options.group_extra = "    peer_networks: [10.0.0.0/8]\n";
  TestCluster cluster(options);
  std::vector<std::vector<std::vector<uint8_t>>> bytes(2);  // by site
  std::vector<std::string> in;
  for (int site = 0; site < 2; ++site) {
    in.push_back(
        WriteInput(cluster, site, {{"w", DType::kF32, {16}}}, &bytes[site]));
  }
  // A loopback endpoint is outside the group's networks: the server refuses
  // the join, which shows the flag's endpoint reached it.
  const std::string refused_err = cluster.dir() + "/refused.txt";
  EXPECT_EQ(WaitExit(StartJoin(cluster, 0, 2, in[0], cluster.dir() + "/o0",
                               refused_err, {"--peer-listen", "127.0.0.1:0"})),
            1);
  absl::StatusOr<std::string> refused = ReadFileToString(refused_err);
  ASSERT_TRUE(refused.ok());
  EXPECT_THAT(*refused, HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(*refused, HasSubstr("'127.0.0.1:"));
  // The same endpoint from the environment (FEDGATHER_PEER_LISTEN, the name
  // the Python backend reads) reaches the server alike.
  const std::string env_err = cluster.dir() + "/env-refused.txt";
  EXPECT_EQ(
      WaitExit(StartJoin(cluster, 0, 2, in[0], cluster.dir() + "/o0", env_err,
                         {}, {"FEDGATHER_PEER_LISTEN=127.0.0.1:0"})),
      1);
  absl::StatusOr<std::string> env_refused = ReadFileToString(env_err);
  ASSERT_TRUE(env_refused.ok());
  EXPECT_THAT(*env_refused, HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(*env_refused, HasSubstr("'127.0.0.1:"));
  // A wildcard listener with no advertised address is refused locally.
  const std::string wildcard_err = cluster.dir() + "/wildcard.txt";
  EXPECT_EQ(WaitExit(StartJoin(cluster, 0, 2, in[0], cluster.dir() + "/o0",
                               wildcard_err, {"--peer-listen", "0.0.0.0:0"})),
            1);
  absl::StatusOr<std::string> wildcard = ReadFileToString(wildcard_err);
  ASSERT_TRUE(wildcard.ok());
  EXPECT_THAT(*wildcard, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(*wildcard, HasSubstr("--peer-advertise"));
  // Advertised inside the networks, both members join and gather.
  std::vector<pid_t> pids;
  for (int site = 0; site < 2; ++site) {
    pids.push_back(StartJoin(
        cluster, site, 2, in[site], absl::StrCat(cluster.dir(), "/o", site), "",
        {"--rank", std::to_string(site), "--peer-listen", "127.0.0.1:0",
         "--peer-advertise", absl::StrCat("10.0.0.", site + 1, ":7070")}));
  }
  for (pid_t pid : pids) EXPECT_EQ(WaitExit(pid), 0);
  std::vector<uint8_t> expected = bytes[0][0];
  expected.insert(expected.end(), bytes[1][0].begin(), bytes[1][0].end());
  for (int site = 0; site < 2; ++site) {
    auto out =
        SafetensorsFile::ReadFile(absl::StrCat(cluster.dir(), "/o", site));
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->tensors().size(), 1u);
    const auto& data = out->tensors()[0].data;
    EXPECT_EQ(std::vector<uint8_t>(data.begin(), data.end()), expected);
  }
}

TEST(CliTest, HungParticipantIsLostAfterTheHeartbeatTimeout) {
  ClusterOptions options(2);
  options.limits.round_timeout = absl::Seconds(120);
  options.limits.heartbeat_interval = absl::Milliseconds(200);
  options.limits.heartbeat_timeout = absl::Seconds(1);
  TestCluster cluster(options);
  std::vector<std::vector<uint8_t>> bytes;
  const std::string in =
      WriteInput(cluster, 1, {{"w", DType::kU8, {16}}}, &bytes);
  const pid_t hung = StartJoin(cluster, 1, 2, in, cluster.dir() + "/o");
  // The peer stops (SIGSTOP) while it waits for the group to form: its
  // connection stays open but it goes silent and never contributes.
  ASSERT_TRUE(cluster.events().WaitFor(
      [](const server::ServerEvent& e) {
        return e.kind == server::EventKind::kMemberJoined &&
               e.identity == "spiffe://fedgather/site-2";
      },
      absl::Seconds(60)));
  ASSERT_EQ(kill(hung, SIGSTOP), 0);
  std::unique_ptr<Client> client = cluster.Connect(TestCluster::Site(0));
  auto group = client->Join({"demo", 2, std::nullopt, absl::Seconds(60)});
  ASSERT_TRUE(group.ok()) << group.status();
  uint8_t mine[16] = {};
  uint8_t out[32];
  ConstHostTensor input{{"w", DType::kU8, {16}}, mine};
  MutableHostTensor output{{"w", DType::kU8, {2, 16}}, out};
  const absl::Time start = absl::Now();
  const absl::Status status =
      (*group)->AllGatherInto({&input, 1}, {&output, 1});
  const absl::Duration took = absl::Now() - start;
  kill(hung, SIGKILL);
  WaitExit(hung);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(
      std::string(status.message()),
      HasSubstr("rank 1 (spiffe://fedgather/site-2) sent no heartbeat"));
  EXPECT_LT(took, absl::Seconds(30));  // the heartbeat bound, not the deadline
}

}  // namespace
}  // namespace fedgather::testing
