#include "common/tls_credentials.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_io.h"
#include "common/peer_identity.h"
#include "common/plaintext_credentials.h"
#include "common/status_macros.h"

namespace fedgather {

absl::StatusOr<TlsFiles> ReadTlsFiles(const std::string& cert_path,
                                      const std::string& key_path,
                                      const std::string& ca_path) {
  TlsFiles files;
  FG_ASSIGN_OR_RETURN(files.cert_pem, ReadFileToString(cert_path));
  FG_ASSIGN_OR_RETURN(files.key_pem, ReadFileToString(key_path));
  FG_ASSIGN_OR_RETURN(files.ca_pem, ReadFileToString(ca_path));
  return files;
}

absl::StatusOr<TlsFiles> ReadTlsDir(const std::string& dir) {
  return ReadTlsFiles(absl::StrCat(dir, "/cert.pem"),
                      absl::StrCat(dir, "/key.pem"),
                      absl::StrCat(dir, "/ca.pem"));
}

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(
    const TlsFiles& files) {
  if (files.insecure_plaintext_for_benchmarks) {
    return MakePlaintextServerCredentials();
  }
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = files.ca_pem;
  options.pem_key_cert_pairs.push_back({files.key_pem, files.cert_pem});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(
    const TlsFiles& files) {
  if (files.insecure_plaintext_for_benchmarks) {
    return MakePlaintextChannelCredentials(
        IdentityFromCertificatePem(files.cert_pem).value_or(""));
  }
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = files.ca_pem;
  options.pem_private_key = files.key_pem;
  options.pem_cert_chain = files.cert_pem;
  return grpc::SslCredentials(options);
}

absl::Status CheckCipherSuiteOverride(const char* value) {
  if (value == nullptr) return absl::OkStatus();
  const std::vector<absl::string_view> allowed =
      absl::StrSplit(kAeadCipherSuites, ':');
  for (absl::string_view suite : absl::StrSplit(value, ':')) {
    if (std::find(allowed.begin(), allowed.end(), suite) == allowed.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GRPC_SSL_CIPHER_SUITES names '", suite,
          "', which is not an AEAD suite fedgather allows; allowed: ",
          kAeadCipherSuites));
    }
  }
  return absl::OkStatus();
}

}  // namespace fedgather
