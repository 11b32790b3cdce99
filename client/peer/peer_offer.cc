#include "client/peer/peer_offer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/endpoint.h"

namespace fedgather {
namespace {

bool IsWildcard(const std::string& host) {
  return host == "0.0.0.0" || host == "::";
}

}  // namespace

absl::StatusOr<std::unique_ptr<PeerOffer>> PeerOffer::Bind(
    const std::string& listen, const std::string& advertise) {
  absl::StatusOr<Endpoint> where = SplitEndpoint(listen);
  if (!where.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer listen address: ", where.status().message()));
  }
  std::string endpoint = advertise;
  if (!advertise.empty()) {
    absl::StatusOr<Endpoint> advertised = SplitEndpoint(advertise);
    if (!advertised.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "peer advertise address: ", advertised.status().message()));
    }
    if (advertised->port == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("peer advertise address '", advertise,
                       "' needs the port the others dial, not 0"));
    }
  } else if (IsWildcard(where->host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "peer listen address '", listen,
        "' is a wildcard that no member can dial: give the address the others "
        "reach this member at as its peer advertise address "
        "(JoinOptions::peer_advertise, fedgather join --peer-advertise, "
        "FEDGATHER_PEER_ADVERTISE)"));
  }
  absl::StatusOr<PeerSocket> socket = ListenTcp(listen);
  if (!socket.ok()) {
    return absl::Status(
        socket.status().code(),
        absl::StrCat("peer listen address: ", socket.status().message()));
  }
  absl::StatusOr<int> port = BoundPort(*socket);
  if (!port.ok()) return port.status();
  if (endpoint.empty()) {
    endpoint = where->host.find(':') == std::string::npos
                   ? absl::StrCat(where->host, ":", *port)
                   : absl::StrCat("[", where->host, "]:", *port);
  }
  return std::unique_ptr<PeerOffer>(
      new PeerOffer(*std::move(socket), *port, std::move(endpoint)));
}

PeerOffer::PeerOffer(PeerSocket socket, int port, std::string endpoint)
    : socket_(std::move(socket)), port_(port), endpoint_(std::move(endpoint)) {}

absl::Status PeerOffer::Open(const TlsFiles& tls, const PeerEpoch& epoch,
                             PeerListenerOptions options) {
  absl::StatusOr<std::shared_ptr<const PeerTls>> peer_tls =
      PeerTls::Create(tls, epoch.crl_pem);
  if (!peer_tls.ok()) {
    return absl::Status(peer_tls.status().code(),
                        absl::StrCat("peer links of group '", epoch.group,
                                     "': ", peer_tls.status().message()));
  }
  absl::StatusOr<std::unique_ptr<PeerListener>> listener =
      PeerListener::Start(*peer_tls, std::move(socket_), std::move(options));
  if (!listener.ok()) return listener.status();
  tls_ = *std::move(peer_tls);
  listener_ = *std::move(listener);
  listener_->ExpectEpoch(epoch.group, epoch.epoch, epoch.rank,
                         epoch.identities);
  return absl::OkStatus();
}

}  // namespace fedgather
