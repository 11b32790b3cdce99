#include "common/endpoint.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace fedgather {

absl::StatusOr<Endpoint> SplitEndpoint(const std::string& text) {
  const size_t colon = text.rfind(':');
  Endpoint endpoint;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(text.substr(colon + 1), &endpoint.port) ||
      endpoint.port < 0 || endpoint.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not HOST:PORT with a port 0..65535"));
  }
  endpoint.host = text.substr(0, colon);
  if (endpoint.host.size() >= 2 && endpoint.host.front() == '[' &&
      endpoint.host.back() == ']') {
    endpoint.host = endpoint.host.substr(1, endpoint.host.size() - 2);
  }
  if (endpoint.host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' has no host"));
  }
  return endpoint;
}

}  // namespace fedgather
