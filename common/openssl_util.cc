#include "common/openssl_util.h"

#include <openssl/err.h>
#include <openssl/pem.h>

#include "absl/strings/str_cat.h"

namespace fedgather {

absl::Status OpenSslError(absl::string_view what, absl::StatusCode code) {
  std::string detail;
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(e, buffer, sizeof(buffer));
    absl::StrAppend(&detail, detail.empty() ? "" : "; ", buffer);
  }
  return absl::Status(code, detail.empty() ? std::string(what)
                                           : absl::StrCat(what, ": ", detail));
}

absl::StatusOr<OpenSslPtr<X509>> ParseCertificatePem(absl::string_view pem) {
  OpenSslPtr<BIO> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return OpenSslError("BIO_new_mem_buf");
  OpenSslPtr<X509> cert(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    return OpenSslError("not a PEM certificate",
                        absl::StatusCode::kInvalidArgument);
  }
  return cert;
}

}  // namespace fedgather
