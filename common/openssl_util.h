// RAII holders for OpenSSL objects and the conversion of OpenSSL's error
// queue into absl::Status. Only .cc files that call OpenSSL include this.
#ifndef FEDGATHER_COMMON_OPENSSL_UTIL_H_
#define FEDGATHER_COMMON_OPENSSL_UTIL_H_

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fedgather {

struct OpenSslDeleter {
  void operator()(BIO* p) const { BIO_free_all(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(GENERAL_NAMES* p) const { GENERAL_NAMES_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
};
template <typename T>
using OpenSslPtr = std::unique_ptr<T, OpenSslDeleter>;

// OpenSslError returns `code` with `what` and the drained error queue.
absl::Status OpenSslError(absl::string_view what,
                          absl::StatusCode code = absl::StatusCode::kInternal);

// ParseCertificatePem parses one PEM certificate.
absl::StatusOr<OpenSslPtr<X509>> ParseCertificatePem(absl::string_view pem);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_OPENSSL_UTIL_H_
