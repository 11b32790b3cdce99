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
// listener on 127.0.0.1:0, and the ring's links: to_next[r] is rank r's
// link to rank r+1, from_prev[r] its link from rank r-1 (none when N = 1).
struct TestRing {
  std::vector<std::shared_ptr<const PeerTls>> tls;
  std::vector<std::unique_ptr<PeerListener>> listeners;
  std::vector<std::unique_ptr<PeerLink>> to_next;
  std::vector<std::unique_ptr<PeerLink>> from_prev;
};
TestRing MakeRing(const PeerTestPki& pki, int world);

}  // namespace fedgather::testing

#endif  // FEDGATHER_TESTS_CLIENT_PEER_PEER_TEST_PKI_H_
