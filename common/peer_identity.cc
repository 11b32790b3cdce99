#include "common/peer_identity.h"

#include "common/openssl_util.h"
#include "common/status_macros.h"

namespace fedgather {
namespace {

std::string Ia5(const ASN1_IA5STRING* s) {
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                     static_cast<size_t>(ASN1_STRING_length(s)));
}

}  // namespace

absl::StatusOr<std::string> IdentityFromCertificatePem(absl::string_view pem) {
  FG_ASSIGN_OR_RETURN(OpenSslPtr<X509> cert, ParseCertificatePem(pem));
  OpenSslPtr<GENERAL_NAMES> names(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr)));
  for (int type : {GEN_URI, GEN_DNS}) {
    for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names.get());
         ++i) {
      const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
      if (name->type == type) {
        return Ia5(type == GEN_URI ? name->d.uniformResourceIdentifier
                                   : name->d.dNSName);
      }
    }
  }
  X509_NAME* subject = X509_get_subject_name(cert.get());
  const int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (index >= 0) {
    ASN1_STRING* cn =
        X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index));
    unsigned char* utf8 = nullptr;
    const int length = ASN1_STRING_to_UTF8(&utf8, cn);
    if (length > 0) {
      std::string identity(reinterpret_cast<char*>(utf8),
                           static_cast<size_t>(length));
      OPENSSL_free(utf8);
      return identity;
    }
  }
  return absl::InvalidArgumentError(
      "the certificate has no SAN URI, no SAN DNS name and no CN");
}

}  // namespace fedgather
