// libFuzzer target: the access policy parser (server/access/access_policy.h). A
// policy file is trusted input, but a bad one must be refused with a
// status, never crash the server at a reload.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "server/access/access_policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fedgather::server::AccessPolicy::Parse(
      absl::string_view(reinterpret_cast<const char*>(data), size), "fuzz")
      .IgnoreError();
  return 0;
}
