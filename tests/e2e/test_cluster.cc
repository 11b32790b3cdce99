#include "tests/e2e/test_cluster.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <random>
#include <thread>

#include "client/provision.h"
#include "server/group_config.h"

namespace fedgather::testing {

void RecordingEvents::OnEvent(const server::ServerEvent& event) {
  absl::MutexLock lock(&mu_);
  events_.push_back(event);
}

bool RecordingEvents::WaitFor(
    const std::function<bool(const server::ServerEvent&)>& match,
    absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto seen = [&] {
    for (const server::ServerEvent& e : events_) {
      if (match(e)) return true;
    }
    return false;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&seen), timeout);
}

TestCluster::TestCluster(const ClusterOptions& options) : options_(options) {
  std::string tmpl = ::testing::TempDir() + "fedgather-XXXXXX";
  char* made = ::mkdtemp(tmpl.data());
  EXPECT_NE(made, nullptr);
  dir_ = tmpl;
  ProvisionOptions provision;
  provision.out_dir = dir_;
  provision.server_names = {"localhost", "127.0.0.1"};
  for (int i = 0; i < options.participants; ++i) {
    provision.participants.push_back(Site(i));
  }
  for (const std::string& name : options.extra) {
    provision.participants.push_back(name);
  }
  const absl::Status provisioned = Provision(provision);
  EXPECT_TRUE(provisioned.ok()) << provisioned;

  server::ServerOptions server_options;
  absl::StatusOr<TlsFiles> tls = ReadTlsFiles(
      dir_ + "/server/cert.pem", dir_ + "/server/key.pem", dir_ + "/ca.pem");
  EXPECT_TRUE(tls.ok()) << tls.status();
  server_options.tls = *tls;
  server::GroupConfig demo;
  demo.name = "demo";
  demo.world_size = options.participants;
  for (int i = 0; i < options.participants; ++i) {
    demo.members.push_back(ParticipantIdentity(Site(i)));
  }
  server_options.groups = {demo};
  server_options.limits = options.limits;
  server_options.limits.events = &events_;
  server_options.timer_period = absl::Milliseconds(20);
  auto server = server::FedgatherServer::Start(std::move(server_options));
  EXPECT_TRUE(server.ok()) << server.status();
  if (server.ok()) server_ = *std::move(server);
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
  ClientOptions options;
  options.server_address = address();
  options.tls = TlsFor(name);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
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
