#include "tests/client/peer/peer_test_pki.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "client/peer/peer_dial.h"
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

TestRing MakeRing(const PeerTestPki& pki, int world) {
  TestRing ring;
  std::vector<std::string> identities;
  for (int r = 0; r < world; ++r)
    identities.push_back(absl::StrCat("site-", r));
  ring.to_next.resize(world);
  ring.from_prev.resize(world);
  for (int r = 0; r < world; ++r) {
    ring.tls.push_back(pki.Tls(identities[r]));
    absl::StatusOr<std::unique_ptr<PeerListener>> listener =
        PeerListener::Start(ring.tls[r], ListenOnLoopback(),
                            PeerListenerOptions());
    EXPECT_TRUE(listener.ok()) << listener.status();
    ring.listeners.push_back(*std::move(listener));
    ring.listeners[r]->ExpectEpoch("g", 1, r, identities);
  }
  if (world == 1) return ring;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::vector<std::thread> dials;
  for (int r = 0; r < world; ++r) {
    dials.emplace_back([&, r] {
      const int next = (r + 1) % world;
      v1::PeerLinkHello hello;
      hello.set_group("g");
      hello.set_epoch(1);
      hello.set_from_rank(r);
      hello.set_to_rank(next);
      absl::StatusOr<std::unique_ptr<PeerLink>> link =
          DialPeerLink(*ring.tls[r],
                       absl::StrCat("127.0.0.1:", ring.listeners[next]->port()),
                       hello, identities[next], deadline);
      EXPECT_TRUE(link.ok()) << link.status();
      if (link.ok()) ring.to_next[r] = *std::move(link);
    });
  }
  for (std::thread& t : dials) t.join();
  for (int r = 0; r < world; ++r) {
    absl::StatusOr<std::unique_ptr<PeerLink>> link =
        ring.listeners[r]->Take("g", 1, (r + world - 1) % world, deadline);
    EXPECT_TRUE(link.ok()) << link.status();
    if (link.ok()) ring.from_prev[r] = *std::move(link);
  }
  return ring;
}

}  // namespace fedgather::testing
