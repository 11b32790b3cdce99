#include "client/peer/peer_dial.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/peer/peer_socket.h"

namespace fedgather {

absl::StatusOr<std::unique_ptr<PeerLink>> DialPeerLink(
    const PeerTls& tls, const std::string& endpoint,
    const v1::PeerLinkHello& hello, const std::string& expected_identity,
    absl::Time deadline) {
  const std::string name =
      absl::StrCat("the link to rank ", hello.to_rank(), " ('",
                   expected_identity, "') at ", endpoint);
  absl::StatusOr<PeerSocket> socket = ConnectTcp(endpoint, deadline);
  if (!socket.ok()) {
    return absl::Status(socket.status().code(),
                        absl::StrCat(name, ": ", socket.status().message()));
  }
  absl::StatusOr<std::unique_ptr<PeerLink>> link =
      tls.Handshake(*std::move(socket), PeerTls::Role::kDialer, deadline, name);
  if (!link.ok()) return link.status();
  if ((*link)->peer().identity != expected_identity) {
    return absl::UnauthenticatedError(absl::StrCat(
        name, ": the certificate there names '", (*link)->peer().identity,
        "', not the member the rendezvous gave for rank ", hello.to_rank(),
        " of group '", hello.group(), "' epoch ", hello.epoch()));
  }
  absl::Status status = (*link)->SendMessage(hello, deadline);
  v1::PeerLinkVerdict verdict;
  if (status.ok()) status = (*link)->ReceiveMessage(&verdict, deadline);
  if (!status.ok()) return status;
  if (verdict.code() != 0) {
    const int code = verdict.code() > 0 && verdict.code() <= 16
                         ? verdict.code()
                         : static_cast<int>(absl::StatusCode::kUnknown);
    return absl::Status(
        static_cast<absl::StatusCode>(code),
        absl::StrCat(name, " was refused: ", verdict.message()));
  }
  return link;
}

}  // namespace fedgather
