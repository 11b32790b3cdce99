// A member's offer of a peer endpoint (JoinOptions::peer_listen,
// client/peer/peer_offer.h), end to end against a real server over mutual
// TLS on 127.0.0.1, with certificates from our own provisioning: the
// endpoints every rank learns, links between real members, the server's
// revocations reaching the members' listeners, and bad addresses refused
// before anything is sent.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "client/peer/peer_dial.h"
#include "client/peer/peer_socket.h"
#include "client/provision.h"
#include "common/cert_issuer.h"
#include "common/file_io.h"
#include "tests/e2e/test_cluster.h"

namespace fedgather::testing {
namespace {

using ::testing::HasSubstr;

// A cluster of `n` sites whose group stays on the relay, so that the
// members make no ring links of their own and the tests make theirs.
ClusterOptions RelayCluster(int n) {
  ClusterOptions options(n);
  options.group_extra = "    data_plane: relay\n";
  return options;
}

v1::PeerLinkHello Hello(const Group& group, int from, int to) {
  v1::PeerLinkHello hello;
  hello.set_group(group.name());
  hello.set_epoch(group.epoch());
  hello.set_from_rank(from);
  hello.set_to_rank(to);
  return hello;
}

TEST(PeerOfferTest, EveryRankLearnsTheBoundEndpointsAndTheLinksCarryBytes) {
  TestCluster cluster(RelayCluster(3));
  OfferingMembers members(cluster, cluster.address());
  ASSERT_FALSE(::testing::Test::HasFailure());
  std::vector<std::string> expected;
  for (const auto& group : members.groups) {
    ASSERT_NE(group->peer_offer(), nullptr);
    ASSERT_GT(group->peer_offer()->port(), 0);
    expected.push_back(absl::StrCat("127.0.0.1:", group->peer_offer()->port()));
  }
  for (const auto& group : members.groups) {
    EXPECT_EQ(group->peer_endpoints(), expected) << "rank " << group->rank();
  }
  auto status = members.clients[0]->GetStatus("demo");
  ASSERT_TRUE(status.ok()) << status.status();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(status->groups(0).members(r).peer_endpoint(), expected[r]);
  }

  // Rank 0 dials rank 1 at the endpoint the rendezvous gave, as the member
  // it named; rank 1's listener admits the link, and bytes cross it.
  const Group& from = *members.groups[0];
  const Group& to = *members.groups[1];
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  auto dialed =
      DialPeerLink(*from.peer_offer()->tls(), from.peer_endpoints()[1],
                   Hello(from, 0, 1), from.identities()[1], deadline);
  ASSERT_TRUE(dialed.ok()) << dialed.status();
  auto taken =
      to.peer_offer()->listener()->Take("demo", to.epoch(), 0, deadline);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ((*taken)->peer().identity, to.identities()[0]);
  const std::vector<uint8_t> bytes = RandomBytes(100000, 21);
  const std::string sent(bytes.begin(), bytes.end());
  ASSERT_TRUE((*dialed)->Send(sent, deadline).ok());
  std::string received(sent.size(), '\0');
  ASSERT_TRUE(
      (*taken)->Receive(received.data(), received.size(), deadline).ok());
  EXPECT_EQ(received, sent);

  // The links do not disturb the relay: the group still gathers.
  std::vector<absl::Status> gathered(3);
  RunRanks(3, [&](int r) { gathered[r] = GatherRanks(*members.groups[r]); });
  for (const absl::Status& s : gathered) EXPECT_TRUE(s.ok()) << s;
}

TEST(PeerOfferTest, AListenerRefusesACertificateTheServerRevoked) {
  ClusterOptions options = RelayCluster(2);
  options.crl = true;
  TestCluster cluster(options);
  // site-2 once had another certificate, now revoked (its key was lost):
  // it still chains to the CA and names site-2, so only the CRL tells.
  absl::StatusOr<std::string> ca_key =
      ReadFileToString(cluster.dir() + "/ca-key.pem");
  absl::StatusOr<std::string> ca_cert =
      ReadFileToString(cluster.dir() + "/ca.pem");
  ASSERT_TRUE(ca_key.ok() && ca_cert.ok());
  const KeyAndCert ca{*ca_key, *ca_cert};
  CertificateSpec spec;
  spec.common_name = "site-2";
  spec.uris = {ParticipantIdentity("site-2")};
  spec.client_auth = true;
  absl::StatusOr<KeyAndCert> lost = IssueCertificate(ca, spec);
  ASSERT_TRUE(lost.ok()) << lost.status();
  absl::StatusOr<std::string> crl =
      IssueCrl(ca, {lost->cert_pem}, absl::Now() - absl::Minutes(1),
               absl::Now() + absl::Hours(1));
  ASSERT_TRUE(crl.ok()) << crl.status();
  ASSERT_TRUE(WriteStringToFile(cluster.dir() + "/crl.pem", *crl).ok());
  ASSERT_TRUE(cluster.server().ReloadPolicy("test").ok());

  OfferingMembers members(cluster, cluster.address());
  ASSERT_FALSE(::testing::Test::HasFailure());
  const Group& listening = *members.groups[0];
  TlsFiles stolen = cluster.TlsFor("site-2");
  stolen.cert_pem = lost->cert_pem;
  stolen.key_pem = lost->key_pem;
  auto tls = PeerTls::Create(stolen);
  ASSERT_TRUE(tls.ok()) << tls.status();
  auto dialed =
      DialPeerLink(**tls, listening.peer_endpoints()[0], Hello(listening, 1, 0),
                   listening.identities()[0], absl::Now() + absl::Seconds(20));
  // The listener closes the connection after the handshake, with no
  // verdict (docs/protocol.md, "Peer links"): the dialer sees it break.
  ASSERT_FALSE(dialed.ok());
  EXPECT_EQ(dialed.status().code(), absl::StatusCode::kUnavailable)
      << dialed.status();
  // The real site-2 still gets rank 1's link: had the lost certificate
  // been admitted, this second link from rank 1 would be refused.
  const Group& dialing = *members.groups[1];
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  auto real =
      DialPeerLink(*dialing.peer_offer()->tls(), dialing.peer_endpoints()[0],
                   Hello(dialing, 1, 0), dialing.identities()[0], deadline);
  ASSERT_TRUE(real.ok()) << real.status();
  auto taken = listening.peer_offer()->listener()->Take(
      "demo", listening.epoch(), 1, deadline);
  ASSERT_TRUE(taken.ok()) << taken.status();
  absl::StatusOr<std::string> real_cert =
      ReadFileToString(cluster.dir() + "/site-2/cert.pem");
  ASSERT_TRUE(real_cert.ok());
  absl::StatusOr<std::string> real_serial = CertificateSerialHex(*real_cert);
  absl::StatusOr<std::string> lost_serial =
      CertificateSerialHex(lost->cert_pem);
  ASSERT_TRUE(real_serial.ok() && lost_serial.ok());
  ASSERT_NE(*real_serial, *lost_serial);
  EXPECT_EQ((*taken)->peer().serial_hex, *real_serial);
}

TEST(PeerOfferTest, BadPeerAddressesAreRefusedBeforeAnythingIsSent) {
  TestCluster cluster(ClusterOptions(1));
  std::unique_ptr<Client> client = cluster.Connect(TestCluster::Site(0));
  absl::StatusOr<PeerSocket> taken = ListenTcp("127.0.0.1:0");
  ASSERT_TRUE(taken.ok()) << taken.status();
  absl::StatusOr<int> taken_port = BoundPort(*taken);
  ASSERT_TRUE(taken_port.ok());
  struct Case {
    std::string listen, advertise;
    absl::StatusCode code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"0.0.0.0:0", "", absl::StatusCode::kInvalidArgument,
       "is a wildcard that no member can dial"},
      {"[::]:0", "", absl::StatusCode::kInvalidArgument, "is a wildcard"},
      {"127.0.0.1", "", absl::StatusCode::kInvalidArgument,
       "peer listen address: '127.0.0.1' is not HOST:PORT"},
      {"127.0.0.1:0", "10.0.0.1", absl::StatusCode::kInvalidArgument,
       "peer advertise address: '10.0.0.1' is not HOST:PORT"},
      {"127.0.0.1:0", "10.0.0.1:0", absl::StatusCode::kInvalidArgument,
       "needs the port the others dial"},
      {"", "10.0.0.1:7000", absl::StatusCode::kInvalidArgument,
       "needs a peer listen address"},
      {absl::StrCat("127.0.0.1:", *taken_port), "",
       absl::StatusCode::kUnavailable, "peer listen address"},
  };
  for (const Case& c : cases) {
    JoinOptions options{"demo", 1, 0, absl::Seconds(30)};
    options.peer_listen = c.listen;
    options.peer_advertise = c.advertise;
    absl::StatusOr<std::unique_ptr<Group>> group = client->Join(options);
    ASSERT_FALSE(group.ok()) << c.listen << " / " << c.advertise;
    EXPECT_EQ(group.status().code(), c.code) << group.status();
    EXPECT_THAT(group.status().message(), HasSubstr(c.says));
    EXPECT_THAT(group.status().message(), HasSubstr("join group 'demo'"));
  }
  // None reached the server (the group of one never formed), and a wildcard
  // listener with an advertised address is fine.
  EXPECT_TRUE(cluster.events().OfKind(server::EventKind::kGroupFormed).empty());
  JoinOptions options{"demo", 1, 0, absl::Seconds(30)};
  options.peer_listen = "0.0.0.0:0";
  options.peer_advertise = "127.0.0.1:7009";
  absl::StatusOr<std::unique_ptr<Group>> group = client->Join(options);
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ((*group)->peer_endpoints(),
            std::vector<std::string>{"127.0.0.1:7009"});
  // The check above could not have passed vacuously: a formed group is
  // recorded, once.
  EXPECT_EQ(cluster.events().OfKind(server::EventKind::kGroupFormed).size(),
            1u);
}

}  // namespace
}  // namespace fedgather::testing
