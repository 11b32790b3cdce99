// libFuzzer target: the audit verifier (common/audit_chain.h), which reads
// files an attacker may have altered. Any file must verify or be refused
// with a status. The input goes to a file, which the verifier streams.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "common/audit_chain.h"
#include "common/file_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path =
      "/tmp/fedgather-audit-fuzz-" + std::to_string(::getpid()) + ".jsonl";
  if (!fedgather::WriteStringToFile(
           path, absl::string_view(reinterpret_cast<const char*>(data), size))
           .ok()) {
    return 0;
  }
  fedgather::VerifyAuditFiles({path}, fedgather::AuditVerifyOptions())
      .IgnoreError();
  return 0;
}
