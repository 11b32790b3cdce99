// Endpoint: the "HOST:PORT" text by which every listener and dial of
// fedgather names an address.
#ifndef FEDGATHER_COMMON_ENDPOINT_H_
#define FEDGATHER_COMMON_ENDPOINT_H_

#include <string>

#include "absl/status/statusor.h"

namespace fedgather {

struct Endpoint {
  std::string host;  // a name or an address; IPv6 without its brackets
  int port = 0;      // 0..65535; 0 asks a listener to pick one
};

// SplitEndpoint reads "HOST:PORT", with an IPv6 address in brackets
// ("[::1]:7000"). INVALID_ARGUMENT, quoting `text`, when there is no port,
// the port is not a number in 0..65535, or the host is empty.
absl::StatusOr<Endpoint> SplitEndpoint(const std::string& text);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_ENDPOINT_H_
