#include "client/peer/peer_link.h"

#include <google/protobuf/message_lite.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fedgather {
namespace {

// The most one SSL_write or SSL_read call is given.
constexpr size_t kMaxCallBytes = size_t{1} << 20;

}  // namespace

PeerLink::PeerLink(PeerSocket socket, ssl_st* ssl, VerifiedCertificate peer,
                   std::string name)
    : socket_(std::move(socket)),
      ssl_(ssl),
      peer_(std::move(peer)),
      name_(std::move(name)) {}

PeerLink::~PeerLink() { SSL_free(ssl_); }

void PeerLink::Abort() {
  aborted_.store(true);
  socket_.Shutdown();
}

absl::Status PeerLink::Broken(absl::string_view what, int ssl_result) {
  const int error = SSL_get_error(ssl_, ssl_result);
  std::string reason;
  if (aborted_.load()) {
    reason = "the link was aborted";
  } else if (error == SSL_ERROR_ZERO_RETURN ||
             (error == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)) {
    reason = "the other end closed the connection";
  } else {
    char text[256] = "";
    ERR_error_string_n(ERR_get_error(), text, sizeof text);
    reason = absl::StrCat("TLS error ", error, " (", text, ")");
  }
  ERR_clear_error();
  return absl::UnavailableError(absl::StrCat(name_, ": ", what, ": ", reason));
}

absl::Status PeerLink::Move(
    absl::string_view what, size_t size, absl::Time deadline,
    std::atomic<int64_t>* moved_bytes,
    const std::function<int(size_t done, int n)>& call) {
  for (size_t done = 0; done < size;) {
    if (aborted_.load()) return Broken(what, 0);
    const int n = static_cast<int>(std::min(size - done, kMaxCallBytes));
    ERR_clear_error();
    const int moved = call(done, n);
    if (moved > 0) {
      done += static_cast<size_t>(moved);
      *moved_bytes += moved;
      continue;
    }
    const int error = SSL_get_error(ssl_, moved);
    if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) {
      return Broken(what, moved);
    }
    // The call is made again with the same arguments, as OpenSSL asks.
    absl::Status ready =
        WaitFor(socket_.fd(), error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT,
                deadline, absl::StrCat(name_, ": ", what));
    if (!ready.ok()) return ready;
  }
  return absl::OkStatus();
}

absl::Status PeerLink::Send(absl::string_view bytes, absl::Time deadline) {
  return Move("send", bytes.size(), deadline, &bytes_sent_,
              [&](size_t done, int n) {
                return SSL_write(ssl_, bytes.data() + done, n);
              });
}

absl::Status PeerLink::Receive(char* out, size_t size, absl::Time deadline) {
  return Move(
      "receive", size, deadline, &bytes_received_,
      [&](size_t done, int n) { return SSL_read(ssl_, out + done, n); });
}

absl::Status PeerLink::SendMessage(const google::protobuf::MessageLite& message,
                                   absl::Time deadline) {
  const std::string body = message.SerializeAsString();
  const uint32_t size = static_cast<uint32_t>(body.size());
  const char prefix[4] = {
      static_cast<char>(size >> 24), static_cast<char>(size >> 16),
      static_cast<char>(size >> 8), static_cast<char>(size)};
  return Send(absl::StrCat(absl::string_view(prefix, 4), body), deadline);
}

absl::Status PeerLink::ReceiveMessage(google::protobuf::MessageLite* message,
                                      absl::Time deadline) {
  unsigned char prefix[4];
  absl::Status status =
      Receive(reinterpret_cast<char*>(prefix), sizeof prefix, deadline);
  if (!status.ok()) return status;
  const uint32_t size = (uint32_t{prefix[0]} << 24) |
                        (uint32_t{prefix[1]} << 16) |
                        (uint32_t{prefix[2]} << 8) | uint32_t{prefix[3]};
  if (size > kMaxPeerLinkMessageBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": a ", message->GetTypeName(), " of ", size,
                     " bytes (at most ", kMaxPeerLinkMessageBytes, ")"));
  }
  std::string body(size, '\0');
  status = Receive(body.data(), size, deadline);
  if (!status.ok()) return status;
  if (!message->ParseFromString(body)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": the ", message->GetTypeName(), " does not parse"));
  }
  return absl::OkStatus();
}

}  // namespace fedgather
