// A federation for peer-link tests: one CA and member certificates made by
// common/cert_issuer.h, and a ring of real links over 127.0.0.1.
#ifndef FEDGATHER_TESTS_CLIENT_PEER_PEER_TEST_PKI_H_
#define FEDGATHER_TESTS_CLIENT_PEER_PEER_TEST_PKI_H_

#include <memory>
#include <string>
#include <vector>

#include "client/peer/peer_link.h"
#include "client/peer/peer_listener.h"
#include "client/peer/peer_socket.h"
#include "client/peer/peer_tls.h"
#include "common/cert_issuer.h"
#include "common/tls_credentials.h"

namespace fedgather::testing {

class PeerTestPki {
 public:
  PeerTestPki();
  const KeyAndCert& ca() const { return ca_; }
  // Member `identity`'s TLS files (CN = identity, clientAuth), issued by
  // this federation's CA, or by `other_ca` when given.
  TlsFiles Member(const std::string& identity,
                  const KeyAndCert* other_ca = nullptr) const;
  std::shared_ptr<const PeerTls> Tls(const std::string& identity,
                                     const std::string& crl_pem = "") const;

 private:
  KeyAndCert ca_;
};

// ListenOnLoopback: a listening socket on 127.0.0.1 at a free port (the
// test fails when none can be bound).
PeerSocket ListenOnLoopback();

// N members "site-0".."site-N-1" of group "g" epoch 1, each with a
// listener on 127.0.0.1:0, and the links of a PeerRing
// (client/peer/peer_ring.h): to[r][k] is rank r's link to rank r+2^k,
// from[r][k] its link from rank r-2^k, for every k with 2^k < N (none when
// N = 1); k = 0 is the ring.
struct TestRing {
  std::vector<std::shared_ptr<const PeerTls>> tls;
  std::vector<std::unique_ptr<PeerListener>> listeners;
  std::vector<std::vector<std::unique_ptr<PeerLink>>> to;
  std::vector<std::vector<std::unique_ptr<PeerLink>>> from;

  // Rank r's ring links (null when N = 1).
  PeerLink* to_next(int r) const {
    return to[r].empty() ? nullptr : to[r][0].get();
  }
  PeerLink* from_prev(int r) const {
    return from[r].empty() ? nullptr : from[r][0].get();
  }
  // Rank r's links as plain pointers, by k.
  std::vector<PeerLink*> to_links(int r) const;
  std::vector<PeerLink*> from_links(int r) const;
};
TestRing MakeRing(const PeerTestPki& pki, int world);

}  // namespace fedgather::testing

#endif  // FEDGATHER_TESTS_CLIENT_PEER_PEER_TEST_PKI_H_
