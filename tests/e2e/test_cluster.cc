#include "tests/e2e/test_cluster.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <random>
#include <thread>

#include "absl/strings/str_split.h"
#include "client/provision.h"
#include "common/cert_issuer.h"
#include "common/file_io.h"

namespace fedgather::testing {

TestCluster::TestCluster(const ClusterOptions& options) : options_(options) {
  std::string tmpl = ::testing::TempDir() + "fedgather-XXXXXX";
  char* made = ::mkdtemp(tmpl.data());
  EXPECT_NE(made, nullptr);
  dir_ = tmpl;
  ProvisionOptions provision;
  provision.out_dir = dir_;
  provision.server_names = options.server_names;
  for (int i = 0; i < options.participants; ++i) {
    provision.participants.push_back(Site(i));
  }
  for (const std::string& name : options.extra) {
    provision.participants.push_back(name);
  }
  provision.observers = options.observers;
  provision.admins = options.admins;
  const absl::Status provisioned = Provision(provision);
  EXPECT_TRUE(provisioned.ok()) << provisioned;
  EXPECT_TRUE(WriteStringToFile(policy_path(), DefaultPolicy()).ok());
  if (options.crl) Revoke({});
  if (!options.in_process_server) return;

  server::ServerOptions server_options;
  absl::StatusOr<TlsFiles> tls = ReadTlsFiles(
      dir_ + "/server/cert.pem", dir_ + "/server/key.pem", dir_ + "/ca.pem");
  EXPECT_TRUE(tls.ok()) << tls.status();
  server_options.tls = *tls;
  server_options.policy_path = policy_path();
  if (options.crl) server_options.crl_path = dir_ + "/crl.pem";
  if (options.audit) {
    server_options.audit.path = audit_path();
    server_options.audit.anchor_every = 50;
    server_options.audit.file = options.audit_file;
    server_options.audit.retry_period = options.audit_retry_period;
  }
  server_options.limits = options.limits;
  if (options.metrics) server_options.metrics_listen = "127.0.0.1:0";
  server_options.limits.events = &events_;
  server_options.timer_period = absl::Milliseconds(20);
  server_options.certificate_recheck_period =
      options.certificate_recheck_period;
  auto server = server::FedgatherServer::Start(std::move(server_options));
  EXPECT_TRUE(server.ok()) << server.status();
  if (server.ok()) server_ = *std::move(server);
}

std::string TestCluster::DefaultPolicy() const {
  std::string yaml = "version: 1\n";
  if (!options_.admins.empty()) {
    yaml += "server_admins:\n";
    for (const std::string& name : options_.admins) {
      yaml += "  - " + ParticipantIdentity(name) + "\n";
    }
  }
  yaml += options_.policy_extra;
  yaml += "groups:\n  - name: demo\n    world_size: " +
          std::to_string(options_.participants) + "\n" + options_.group_extra +
          "    members:\n";
  for (int i = 0; i < options_.participants; ++i) {
    yaml += "      " + ParticipantIdentity(Site(i)) + ": participant\n";
  }
  for (const std::string& name : options_.observers) {
    yaml += "      " + ParticipantIdentity(name) + ": observer\n";
  }
  for (const std::string& name : options_.admins) {
    yaml += "      " + ParticipantIdentity(name) + ": admin\n";
  }
  return yaml + options_.more_groups;
}

void TestCluster::Revoke(const std::vector<std::string>& names) {
  const std::string crl_path = dir_ + "/crl.pem";
  absl::StatusOr<std::string> ca_key = ReadFileToString(dir_ + "/ca-key.pem");
  absl::StatusOr<std::string> ca_cert = ReadFileToString(dir_ + "/ca.pem");
  ASSERT_TRUE(ca_key.ok() && ca_cert.ok());
  std::vector<std::string> revoked;
  for (const std::string& name : names) {
    absl::StatusOr<std::string> cert =
        ReadFileToString(dir_ + "/" + name + "/cert.pem");
    ASSERT_TRUE(cert.ok()) << cert.status();
    revoked.push_back(*cert);
  }
  absl::StatusOr<std::string> existing = ReadFileToString(crl_path);
  const absl::Time now = absl::Now();
  absl::StatusOr<std::string> crl =
      IssueCrl(KeyAndCert{*ca_key, *ca_cert}, revoked, now - absl::Minutes(1),
               now + absl::Hours(24), existing.ok() ? *existing : "");
  ASSERT_TRUE(crl.ok()) << crl.status();
  ASSERT_TRUE(WriteStringToFile(crl_path, *crl).ok());
}

void TestCluster::StopServer() {
  if (server_ != nullptr) {
    const absl::Status stopped = server_->Shutdown();
    EXPECT_TRUE(stopped.ok()) << stopped;
  }
}

TestCluster::~TestCluster() {
  server_.reset();
  const std::string command = "rm -rf '" + dir_ + "'";
  EXPECT_EQ(std::system(command.c_str()), 0);
}

std::string TestCluster::address() const {
  return "127.0.0.1:" + std::to_string(server_->port());
}

TlsFiles TestCluster::TlsFor(const std::string& name) const {
  absl::StatusOr<TlsFiles> tls = ReadTlsDir(dir_ + "/" + name);
  EXPECT_TRUE(tls.ok()) << tls.status();
  return tls.ok() ? *tls : TlsFiles{};
}

std::unique_ptr<Client> TestCluster::Connect(const std::string& name) const {
  return ConnectVia(name, address());
}

std::unique_ptr<Client> TestCluster::ConnectVia(
    const std::string& name, const std::string& address) const {
  ClientOptions options;
  options.server_address = address;
  options.tls = TlsFor(name);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

std::unique_ptr<Group> MustJoin(const TestCluster& cluster, Client& client,
                                int rank) {
  auto group =
      client.Join({"demo", cluster.participants(), rank, absl::Seconds(30)});
  EXPECT_TRUE(group.ok()) << group.status();
  return group.ok() ? *std::move(group) : nullptr;
}

absl::Status GatherRanks(Group& group) {
  int32_t mine = 7000 + group.rank();
  std::vector<int32_t> out(group.world_size(), -1);
  ConstHostTensor in{{"r", DType::kI32, {1}}, &mine};
  MutableHostTensor gathered{{"r", DType::kI32, {group.world_size(), 1}},
                             out.data()};
  absl::Status status = group.AllGatherInto({&in, 1}, {&gathered, 1});
  if (!status.ok()) return status;
  for (int r = 0; r < group.world_size(); ++r) {
    if (out[r] != 7000 + r) return absl::InternalError("wrong gathered value");
  }
  return absl::OkStatus();
}

OfferingMembers::OfferingMembers(
    const TestCluster& cluster, const std::string& address,
    const std::function<void(int, JoinOptions&)>& adjust) {
  const int n = cluster.participants();
  clients.resize(n);
  groups.resize(n);
  RunRanks(n, [&](int r) {
    clients[r] = cluster.ConnectVia(TestCluster::Site(r), address);
    JoinOptions options{"demo", n, r, absl::Seconds(60)};
    options.peer_listen = "127.0.0.1:0";
    if (adjust) adjust(r, options);
    absl::StatusOr<std::unique_ptr<Group>> group = clients[r]->Join(options);
    EXPECT_TRUE(group.ok()) << "rank " << r << ": " << group.status();
    if (group.ok()) groups[r] = *std::move(group);
  });
}

std::vector<absl::Status> OfferingMembers::Run(
    const std::function<absl::Status(int)>& fn) {
  return RunEveryRank(static_cast<int>(groups.size()), fn);
}

Members::Members(const TestCluster& cluster) {
  const int n = cluster.participants();
  clients.resize(n);
  groups.resize(n);
  RunRanks(n, [&](int i) {
    clients[i] = cluster.Connect(TestCluster::Site(i));
    groups[i] = MustJoin(cluster, *clients[i], i);
  });
}

std::vector<absl::Status> Members::Run(
    const std::function<absl::Status(int)>& fn) {
  return RunEveryRank(static_cast<int>(groups.size()), fn);
}

std::vector<absl::Status> RunEveryRank(
    int n, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> statuses(n);
  RunRanks(n, [&](int i) { statuses[i] = fn(i); });
  return statuses;
}

void Members::ExpectNextRoundWorks() {
  for (const absl::Status& s :
       Run([&](int i) { return GatherRanks(*groups[i]); })) {
    EXPECT_TRUE(s.ok()) << s;
  }
}

void ExpectSameStatusEverywhere(const std::vector<absl::Status>& statuses,
                                absl::StatusCode code) {
  ASSERT_FALSE(statuses.empty());
  for (const absl::Status& s : statuses) {
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_EQ(s, statuses[0]);
  }
}

std::vector<nlohmann::json> ReadAuditRecords(const std::string& path) {
  std::vector<nlohmann::json> records;
  absl::StatusOr<std::string> text = ReadFileToString(path);
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return records;
  for (absl::string_view line :
       absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    records.push_back(nlohmann::json::parse(line));
  }
  return records;
}

void RunRanks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back(fn, i);
  for (std::thread& t : threads) t.join();
}

std::vector<uint8_t> RandomBytes(size_t size, uint32_t seed) {
  std::mt19937 generator(seed);
  std::vector<uint8_t> bytes(size);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(generator());
  return bytes;
}

}  // namespace fedgather::testing
