// PeerLink: one established peer link of the direct data plane
// (docs/protocol.md, "Peer links"): a TCP connection with TLS 1.3 whose
// other end's certificate PeerTls (client/peer/peer_tls.h) has verified.
//
// Threads: at most one thread sends and at most one thread receives at a
// time, and the data plane uses each link in one direction only once the
// hello and verdict are exchanged (docs/threading.md), so one SSL object
// is never read and written at once. Abort may be called from any thread,
// at any time.
//
// Every blocking call takes a deadline (real time, for poll(2)); a link
// that makes no progress before it is DEADLINE_EXCEEDED, and a link whose
// call failed is broken for good: the caller drops it.
#ifndef FEDGATHER_CLIENT_PEER_PEER_LINK_H_
#define FEDGATHER_CLIENT_PEER_PEER_LINK_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/peer/peer_socket.h"
#include "common/cert_verifier.h"

struct ssl_st;

namespace google::protobuf {
class MessageLite;
}

namespace fedgather {

// The largest hello or verdict a link accepts, in bytes.
inline constexpr size_t kMaxPeerLinkMessageBytes = 4096;

class PeerLink {
 public:
  // Takes `socket` and `ssl` (handshake done, set to that socket);
  // `peer` is what the verification found. PeerTls makes links.
  PeerLink(PeerSocket socket, ssl_st* ssl, VerifiedCertificate peer,
           std::string name);
  ~PeerLink();
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;

  // The verified certificate of the other end.
  const VerifiedCertificate& peer() const { return peer_; }
  // How errors name this link, e.g. "the link from rank 2 ('site-3')".
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  // Send writes all of `bytes`. UNAVAILABLE when the link breaks or was
  // aborted, DEADLINE_EXCEEDED when it stalls past `deadline`; both name
  // the link.
  absl::Status Send(absl::string_view bytes, absl::Time deadline);
  // Receive reads exactly `size` bytes into `out`; errors as Send's, and
  // UNAVAILABLE when the other end closes first.
  absl::Status Receive(char* out, size_t size, absl::Time deadline);

  // SendMessage / ReceiveMessage: one length-prefixed protobuf message
  // (a 4-byte big-endian length, then the message). ReceiveMessage fails
  // with INVALID_ARGUMENT for a length over kMaxPeerLinkMessageBytes or a
  // message that does not parse.
  absl::Status SendMessage(const google::protobuf::MessageLite& message,
                           absl::Time deadline);
  absl::Status ReceiveMessage(google::protobuf::MessageLite* message,
                              absl::Time deadline);

  // Abort breaks the link: a Send or Receive in progress on another thread
  // returns UNAVAILABLE soon after, and every later one at once.
  void Abort();

  // The bytes Send and Receive (and the messages) moved so far, as TLS
  // payload. Readable from any thread.
  int64_t bytes_sent() const { return bytes_sent_.load(); }
  int64_t bytes_received() const { return bytes_received_.load(); }

 private:
  // Move runs `call` (an SSL_write or SSL_read of `n` bytes from `done`
  // on) until `size` bytes moved, waiting on the socket as OpenSSL asks,
  // and adds what moved to `moved`.
  absl::Status Move(absl::string_view what, size_t size, absl::Time deadline,
                    std::atomic<int64_t>* moved,
                    const std::function<int(size_t done, int n)>& call);
  absl::Status Broken(absl::string_view what, int ssl_result);

  PeerSocket socket_;
  ssl_st* const ssl_;
  const VerifiedCertificate peer_;
  std::string name_;
  std::atomic<bool> aborted_{false};
  std::atomic<int64_t> bytes_sent_{0};
  std::atomic<int64_t> bytes_received_{0};
};

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_PEER_PEER_LINK_H_
