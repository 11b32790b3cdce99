// IpNetwork: an IPv4 or IPv6 network in CIDR notation ("10.0.0.0/8",
// "fd00::/8"), and whether an address lies in it.
#ifndef FEDGATHER_COMMON_IP_NETWORK_H_
#define FEDGATHER_COMMON_IP_NETWORK_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace fedgather {

class IpNetwork {
 public:
  // Parse reads "ADDRESS/PREFIX" (PREFIX 0..32 for IPv4, 0..128 for
  // IPv6). INVALID_ARGUMENT, quoting `text`, otherwise, and when the
  // address has bits set past the prefix ("10.0.0.1/8"), which usually
  // means a typo.
  static absl::StatusOr<IpNetwork> Parse(const std::string& text);

  // Contains says whether `address` (an IPv4 or IPv6 literal, without
  // brackets) is in the network. An IPv4 network never contains an IPv6
  // address nor the reverse, IPv4-mapped ones included. False for text
  // that is no address.
  bool Contains(const std::string& address) const;

  // The network as Parse read it.
  const std::string& text() const { return text_; }

 private:
  IpNetwork() = default;
  bool v6_ = false;
  int prefix_ = 0;
  std::array<uint8_t, 16> bytes_{};
  std::string text_;
};

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_IP_NETWORK_H_
