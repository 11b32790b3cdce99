#include "tests/client/peer/peer_test_pki.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "client/peer/peer_dial.h"
#include "client/peer/peer_ring.h"
#include "gtest/gtest.h"

namespace fedgather::testing {

PeerTestPki::PeerTestPki() {
  absl::StatusOr<KeyAndCert> ca =
      CreateCertificateAuthority("peer test CA", absl::Hours(2));
  EXPECT_TRUE(ca.ok()) << ca.status();
  ca_ = *ca;
}

TlsFiles PeerTestPki::Member(const std::string& identity,
                             const KeyAndCert* other_ca) const {
  CertificateSpec spec;
  spec.common_name = identity;
  spec.client_auth = true;
  absl::StatusOr<KeyAndCert> leaf =
      IssueCertificate(other_ca != nullptr ? *other_ca : ca_, spec);
  EXPECT_TRUE(leaf.ok()) << leaf.status();
  TlsFiles files;
  files.cert_pem = leaf->cert_pem;
  files.key_pem = leaf->key_pem;
  files.ca_pem = ca_.cert_pem;
  return files;
}

std::shared_ptr<const PeerTls> PeerTestPki::Tls(
    const std::string& identity, const std::string& crl_pem) const {
  absl::StatusOr<std::shared_ptr<const PeerTls>> tls =
      PeerTls::Create(Member(identity), crl_pem);
  EXPECT_TRUE(tls.ok()) << tls.status();
  return *tls;
}

PeerSocket ListenOnLoopback() {
  absl::StatusOr<PeerSocket> socket = ListenTcp("127.0.0.1:0");
  EXPECT_TRUE(socket.ok()) << socket.status();
  return socket.ok() ? *std::move(socket) : PeerSocket();
}

std::vector<PeerLink*> TestRing::to_links(int r) const {
  std::vector<PeerLink*> links;
  for (const std::unique_ptr<PeerLink>& link : to[r])
    links.push_back(link.get());
  return links;
}

std::vector<PeerLink*> TestRing::from_links(int r) const {
  std::vector<PeerLink*> links;
  for (const std::unique_ptr<PeerLink>& link : from[r]) {
    links.push_back(link.get());
  }
  return links;
}

TestRing MakeRing(const PeerTestPki& pki, int world) {
  TestRing ring;
  std::vector<std::string> identities;
  for (int r = 0; r < world; ++r)
    identities.push_back(absl::StrCat("site-", r));
  const int steps = LogSteps(world);
  ring.to.resize(world);
  ring.from.resize(world);
  for (int r = 0; r < world; ++r) {
    ring.to[r].resize(steps);
    ring.from[r].resize(steps);
    ring.tls.push_back(pki.Tls(identities[r]));
    absl::StatusOr<std::unique_ptr<PeerListener>> listener =
        PeerListener::Start(ring.tls[r], ListenOnLoopback(),
                            PeerListenerOptions());
    EXPECT_TRUE(listener.ok()) << listener.status();
    ring.listeners.push_back(*std::move(listener));
    ring.listeners[r]->ExpectEpoch("g", 1, r, identities);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::vector<std::thread> dials;
  for (int r = 0; r < world; ++r) {
    for (int k = 0; k < steps; ++k) {
      dials.emplace_back([&, r, k] {
        const int to = (r + (1 << k)) % world;
        v1::PeerLinkHello hello;
        hello.set_group("g");
        hello.set_epoch(1);
        hello.set_from_rank(r);
        hello.set_to_rank(to);
        absl::StatusOr<std::unique_ptr<PeerLink>> link =
            DialPeerLink(*ring.tls[r],
                         absl::StrCat("127.0.0.1:", ring.listeners[to]->port()),
                         hello, identities[to], deadline);
        EXPECT_TRUE(link.ok()) << link.status();
        if (link.ok()) ring.to[r][k] = *std::move(link);
      });
    }
  }
  for (std::thread& t : dials) t.join();
  for (int r = 0; r < world; ++r) {
    for (int k = 0; k < steps; ++k) {
      absl::StatusOr<std::unique_ptr<PeerLink>> link = ring.listeners[r]->Take(
          "g", 1, ((r - (1 << k)) % world + world) % world, deadline);
      EXPECT_TRUE(link.ok()) << link.status();
      if (link.ok()) ring.from[r][k] = *std::move(link);
    }
  }
  return ring;
}

}  // namespace fedgather::testing
