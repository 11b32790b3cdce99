#include "common/peer_identity.h"

#include <openssl/err.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/openssl_util.h"
#include "common/status_macros.h"

namespace fedgather {
namespace {

std::string AsnText(const ASN1_STRING* s) {
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                     static_cast<size_t>(ASN1_STRING_length(s)));
}

// Usable accepts `identity` from `source` when it is non-empty and free of
// control characters, so that it can be compared, logged and audited as is.
absl::StatusOr<std::string> Usable(std::string identity,
                                   absl::string_view source) {
  if (identity.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the certificate's ", source, " is empty"));
  }
  for (unsigned char c : identity) {
    if (c < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the certificate's ", source, " holds a control character"));
    }
  }
  return identity;
}

absl::StatusOr<std::string> CommonName(X509* cert) {
  X509_NAME* subject = X509_get_subject_name(cert);
  const int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (index < 0) {
    return absl::InvalidArgumentError(
        "the certificate has no SAN URI, no SAN DNS name and no subject CN");
  }
  if (X509_NAME_get_index_by_NID(subject, NID_commonName, index) >= 0) {
    return absl::InvalidArgumentError(
        "the certificate's subject holds more than one CN");
  }
  ASN1_STRING* cn =
      X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index));
  unsigned char* utf8 = nullptr;
  const int length = ASN1_STRING_to_UTF8(&utf8, cn);
  if (length < 0) {
    return OpenSslError("the certificate's subject CN is not text",
                        absl::StatusCode::kInvalidArgument);
  }
  std::string text(reinterpret_cast<char*>(utf8), static_cast<size_t>(length));
  OPENSSL_free(utf8);
  return Usable(std::move(text), "subject CN");
}

}  // namespace

absl::StatusOr<std::string> IdentityFromCertificatePem(absl::string_view pem) {
  ERR_clear_error();  // So errors reported below are this call's own.
  FG_ASSIGN_OR_RETURN(OpenSslPtr<X509> cert, ParseCertificatePem(pem));
  int found = 0;  // -1: absent, -2: more than one, >= 0: present
  OpenSslPtr<GENERAL_NAMES> names(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, &found, nullptr)));
  if (found == -2) {
    return absl::InvalidArgumentError(
        "the certificate holds more than one SAN extension");
  }
  if (found >= 0 && names == nullptr) {
    return OpenSslError("the certificate's SAN extension does not decode",
                        absl::StatusCode::kInvalidArgument);
  }
  if (names != nullptr) {
    for (int type : {GEN_URI, GEN_DNS}) {
      for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
        const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
        if (name->type != type) continue;
        return type == GEN_URI
                   ? Usable(AsnText(name->d.uniformResourceIdentifier),
                            "first SAN URI")
                   : Usable(AsnText(name->d.dNSName), "first SAN DNS name");
      }
    }
  }
  return CommonName(cert.get());
}

}  // namespace fedgather
