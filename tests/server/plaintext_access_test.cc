// The benchmarks-only plaintext mode (common/plaintext_credentials.h) with a
// real server on 127.0.0.1:0: who a plaintext caller is, what it may do, and
// that neither side talks plaintext to a TLS peer or takes a header's word
// over TLS.
#include <gmock/gmock.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/provision.h"
#include "common/plaintext_credentials.h"
#include "common/tls_credentials.h"
#include "server/fedgather_server.h"

namespace fedgather {
namespace {

using ::testing::HasSubstr;

std::string Site(int i) { return absl::StrCat("site-", i + 1); }

class PlaintextAccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "fedgather-plaintext-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    ProvisionOptions provision;
    provision.out_dir = dir_;
    provision.server_names = {"localhost", "127.0.0.1"};
    provision.participants = {Site(0), Site(1)};
    provision.observers = {"outsider-tls"};
    ASSERT_TRUE(Provision(provision).ok());
  }
  void TearDown() override {
    server_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  void StartServer(bool plaintext) {
    server::ServerOptions options;
    absl::StatusOr<TlsFiles> tls = ReadTlsDir(dir_ + "/server");
    ASSERT_TRUE(tls.ok()) << tls.status();
    options.tls = *tls;
    options.tls.insecure_plaintext_for_benchmarks = plaintext;
    options.policy_path = dir_ + "/policy.yaml";
    absl::StatusOr<std::unique_ptr<server::FedgatherServer>> server =
        server::FedgatherServer::Start(std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    address_ = absl::StrCat("127.0.0.1:", server_->port());
  }

  std::unique_ptr<Client> Connect(const std::string& name, bool plaintext) {
    ClientOptions options;
    options.server_address = address_;
    absl::StatusOr<TlsFiles> tls = ReadTlsDir(dir_ + "/" + name);
    EXPECT_TRUE(tls.ok()) << tls.status();
    options.tls = tls.value_or(TlsFiles{});
    options.tls.insecure_plaintext_for_benchmarks = plaintext;
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  // GetStatus over `channel`, made by the test itself.
  grpc::Status RawGetStatus(const std::shared_ptr<grpc::Channel>& channel) {
    v1::Admin::Stub stub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    v1::StatusRequest request;
    request.set_group("demo");
    v1::StatusReply reply;
    return stub.GetStatus(&context, request, &reply);
  }

  std::string dir_;
  std::string address_;
  std::unique_ptr<server::FedgatherServer> server_;
};

TEST_F(PlaintextAccessTest, MembersGatherUnderTheIdentitiesTheyName) {
  StartServer(/*plaintext=*/true);
  std::vector<std::string> gathered[2];
  std::vector<std::string> identities[2];
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      std::unique_ptr<Client> client = Connect(Site(rank), true);
      ASSERT_NE(client, nullptr);
      absl::StatusOr<std::unique_ptr<Group>> group =
          client->Join({"demo", 2, rank, absl::Seconds(30)});
      ASSERT_TRUE(group.ok()) << group.status();
      identities[rank] = (*group)->identities();
      absl::StatusOr<std::vector<std::string>> all =
          (*group)->AllGatherBytes(absl::StrCat("from ", Site(rank)));
      ASSERT_TRUE(all.ok()) << all.status();
      gathered[rank] = *all;
      // Both must finish before either leaves (leaving ends the epoch).
      absl::StatusOr<std::vector<std::string>> barrier =
          (*group)->AllGatherBytes("");
      ASSERT_TRUE(barrier.ok()) << barrier.status();
    });
  }
  for (std::thread& t : ranks) t.join();
  const std::vector<std::string> want_identities = {
      ParticipantIdentity(Site(0)), ParticipantIdentity(Site(1))};
  const std::vector<std::string> want = {"from site-1", "from site-2"};
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(identities[rank], want_identities);
    EXPECT_EQ(gathered[rank], want);
  }
}

TEST_F(PlaintextAccessTest, ACallWithoutTheIdentityHeaderIsUnauthenticated) {
  StartServer(/*plaintext=*/true);
  const grpc::Status status = RawGetStatus(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(status.error_message(), HasSubstr(kPlaintextIdentityHeader));
}

TEST_F(PlaintextAccessTest, AClaimedIdentityStillNeedsThePolicy) {
  StartServer(/*plaintext=*/true);
  const grpc::Status outsider = RawGetStatus(grpc::CreateChannel(
      address_, MakePlaintextChannelCredentials("spiffe://fedgather/mallory")));
  EXPECT_EQ(outsider.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << outsider.error_message();
  const grpc::Status empty = RawGetStatus(
      grpc::CreateChannel(address_, MakePlaintextChannelCredentials("")));
  EXPECT_EQ(empty.error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << empty.error_message();
}

TEST_F(PlaintextAccessTest, NeitherSideSpeaksPlaintextToATlsPeer) {
  StartServer(/*plaintext=*/true);
  std::unique_ptr<Client> tls_client = Connect(Site(0), false);
  ASSERT_NE(tls_client, nullptr);
  EXPECT_EQ(tls_client->GetStatus("demo", absl::Seconds(5)).status().code(),
            absl::StatusCode::kUnavailable);

  server_.reset();
  StartServer(/*plaintext=*/false);
  std::unique_ptr<Client> plain_client = Connect(Site(0), true);
  ASSERT_NE(plain_client, nullptr);
  EXPECT_EQ(plain_client->GetStatus("demo", absl::Seconds(5)).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(PlaintextAccessTest, ATlsServerIgnoresTheIdentityHeader) {
  StartServer(/*plaintext=*/false);
  absl::StatusOr<TlsFiles> outsider = ReadTlsDir(dir_ + "/outsider-tls");
  ASSERT_TRUE(outsider.ok());
  auto channel_with = [&](grpc::SslCredentialsOptions ssl) {
    std::vector<
        std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(
        MakeIdentityHeaderInterceptor(ParticipantIdentity(Site(0))));
    return grpc::experimental::CreateCustomChannelWithInterceptors(
        address_, grpc::SslCredentials(ssl), grpc::ChannelArguments(),
        std::move(interceptors));
  };
  // No client certificate, a header naming site-1: the TLS handshake
  // refuses the connection, so no call reaches the service.
  grpc::SslCredentialsOptions anonymous;
  anonymous.pem_root_certs = outsider->ca_pem;
  const grpc::Status no_cert = RawGetStatus(channel_with(anonymous));
  EXPECT_EQ(no_cert.error_code(), grpc::StatusCode::UNAVAILABLE)
      << no_cert.error_message();
  // An observer's certificate and a header naming participant site-1: the
  // caller is the observer, which may not join.
  grpc::SslCredentialsOptions observer = anonymous;
  observer.pem_private_key = outsider->key_pem;
  observer.pem_cert_chain = outsider->cert_pem;
  v1::Rendezvous::Stub stub(channel_with(observer));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  auto session = stub.Session(&context);
  v1::SessionRequest join;
  join.mutable_join()->set_group("demo");
  join.mutable_join()->set_world_size(2);
  session->Write(join);
  session->WritesDone();
  v1::SessionEvent event;
  while (session->Read(&event)) {
  }
  const grpc::Status joined = session->Finish();
  EXPECT_EQ(joined.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << joined.error_message();
  EXPECT_THAT(joined.error_message(), HasSubstr("observer"));
}

}  // namespace
}  // namespace fedgather
