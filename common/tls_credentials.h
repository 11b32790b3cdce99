// TLS material and the gRPC credentials built from it. Both sides use mutual
// TLS: the server requires and verifies a client certificate, and the client
// verifies the server against the same CA.
#ifndef FEDGATHER_COMMON_TLS_CREDENTIALS_H_
#define FEDGATHER_COMMON_TLS_CREDENTIALS_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace fedgather {

struct TlsFiles {
  std::string cert_pem;  // this end's certificate
  std::string key_pem;   // its private key
  std::string ca_pem;    // the CA that must have signed the peer
};

// ReadTlsFiles loads the three PEM files; the error names the missing file.
absl::StatusOr<TlsFiles> ReadTlsFiles(const std::string& cert_path,
                                      const std::string& key_path,
                                      const std::string& ca_path);

// ReadTlsDir loads DIR/cert.pem, DIR/key.pem and DIR/ca.pem, the layout that
// `fedgather provision` writes for each participant.
absl::StatusOr<TlsFiles> ReadTlsDir(const std::string& dir);

// MakeServerCredentials requires and verifies client certificates.
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(
    const TlsFiles& files);

// MakeChannelCredentials presents `files.cert_pem` and verifies the server.
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(
    const TlsFiles& files);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_TLS_CREDENTIALS_H_
