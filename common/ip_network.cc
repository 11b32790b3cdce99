#include "common/ip_network.h"

#include <arpa/inet.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace fedgather {
namespace {

// ParseAddress reads an IPv4 or IPv6 literal into `bytes`; false when it
// is neither.
bool ParseAddress(const std::string& text, bool* v6,
                  std::array<uint8_t, 16>* bytes) {
  bytes->fill(0);
  if (inet_pton(AF_INET, text.c_str(), bytes->data()) == 1) {
    *v6 = false;
    return true;
  }
  if (inet_pton(AF_INET6, text.c_str(), bytes->data()) == 1) {
    *v6 = true;
    return true;
  }
  return false;
}

// PrefixMatches says whether `a` and `b` agree in their first `prefix` bits.
bool PrefixMatches(const std::array<uint8_t, 16>& a,
                   const std::array<uint8_t, 16>& b, int prefix) {
  for (int bit = 0; bit < prefix; bit += 8) {
    const int bits = std::min(8, prefix - bit);
    const uint8_t mask = static_cast<uint8_t>(0xff << (8 - bits));
    if ((a[bit / 8] & mask) != (b[bit / 8] & mask)) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<IpNetwork> IpNetwork::Parse(const std::string& text) {
  const size_t slash = text.find('/');
  IpNetwork network;
  network.text_ = text;
  const auto invalid = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a network in CIDR notation: ", why));
  };
  if (slash == std::string::npos) return invalid("no /PREFIX");
  if (!ParseAddress(text.substr(0, slash), &network.v6_, &network.bytes_)) {
    return invalid("no IPv4 or IPv6 address before the /");
  }
  const int most = network.v6_ ? 128 : 32;
  if (!absl::SimpleAtoi(text.substr(slash + 1), &network.prefix_) ||
      network.prefix_ < 0 || network.prefix_ > most) {
    return invalid(absl::StrCat("the prefix must be 0..", most));
  }
  for (int bit = network.prefix_; bit < most; ++bit) {
    if (network.bytes_[bit / 8] & (0x80 >> (bit % 8))) {
      return invalid("the address has bits set past the prefix");
    }
  }
  return network;
}

bool IpNetwork::Contains(const std::string& address) const {
  bool v6 = false;
  std::array<uint8_t, 16> bytes;
  return ParseAddress(address, &v6, &bytes) && v6 == v6_ &&
         PrefixMatches(bytes, bytes_, prefix_);
}

}  // namespace fedgather
