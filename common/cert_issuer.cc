#include "common/cert_issuer.h"

#include <arpa/inet.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/pem.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/openssl_util.h"
#include "common/status_macros.h"

namespace fedgather {
namespace {

absl::StatusOr<OpenSslPtr<EVP_PKEY>> NewKey() {
  OpenSslPtr<EVP_PKEY> key(EVP_EC_gen("P-256"));
  if (key == nullptr) return OpenSslError("EC P-256 key generation");
  return key;
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid,
                          const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) {
    return OpenSslError(
        absl::StrCat("extension ", OBJ_nid2sn(nid), "=", value));
  }
  const int added = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return added == 1 ? absl::OkStatus() : OpenSslError("X509_add_ext");
}

// NewCertificate makes an unsigned certificate for `key` named `cn`.
absl::StatusOr<OpenSslPtr<X509>> NewCertificate(EVP_PKEY* key,
                                                const std::string& cn,
                                                absl::Time not_before,
                                                absl::Time not_after) {
  OpenSslPtr<X509> cert(X509_new());
  if (cert == nullptr) return OpenSslError("X509_new");
  OpenSslPtr<BIGNUM> serial(BN_new());
  if (serial == nullptr ||
      BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) ==
          nullptr) {
    return OpenSslError("serial number");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_set_version(cert.get(), 2) != 1 ||
      ASN1_TIME_set(X509_getm_notBefore(cert.get()),
                    absl::ToTimeT(not_before)) == nullptr ||
      ASN1_TIME_set(X509_getm_notAfter(cert.get()), absl::ToTimeT(not_after)) ==
          nullptr ||
      (!cn.empty() && X509_NAME_add_entry_by_txt(
                          name, "CN", MBSTRING_UTF8,
                          reinterpret_cast<const unsigned char*>(cn.c_str()),
                          -1, -1, 0) != 1) ||
      X509_set_pubkey(cert.get(), key) != 1) {
    return OpenSslError("certificate fields");
  }
  return cert;
}

absl::StatusOr<KeyAndCert> Encode(EVP_PKEY* key, X509* cert) {
  OpenSslPtr<BIO> key_bio(BIO_new(BIO_s_mem()));
  OpenSslPtr<BIO> cert_bio(BIO_new(BIO_s_mem()));
  if (key_bio == nullptr || cert_bio == nullptr ||
      PEM_write_bio_PrivateKey(key_bio.get(), key, nullptr, nullptr, 0, nullptr,
                               nullptr) != 1 ||
      PEM_write_bio_X509(cert_bio.get(), cert) != 1) {
    return OpenSslError("PEM encoding");
  }
  KeyAndCert out;
  char* data = nullptr;
  long size = BIO_get_mem_data(key_bio.get(), &data);
  out.key_pem.assign(data, static_cast<size_t>(size));
  size = BIO_get_mem_data(cert_bio.get(), &data);
  out.cert_pem.assign(data, static_cast<size_t>(size));
  return out;
}

absl::StatusOr<OpenSslPtr<EVP_PKEY>> ParseKeyPem(const std::string& pem) {
  OpenSslPtr<BIO> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  OpenSslPtr<EVP_PKEY> key(
      bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr)
          : nullptr);
  if (key == nullptr) {
    return OpenSslError("the CA key is not a PEM private key",
                        absl::StatusCode::kInvalidArgument);
  }
  return key;
}

absl::Status Sign(X509* cert, EVP_PKEY* key) {
  return X509_sign(cert, key, EVP_sha256()) > 0 ? absl::OkStatus()
                                                : OpenSslError("X509_sign");
}

}  // namespace

absl::StatusOr<KeyAndCert> CreateCertificateAuthority(
    const std::string& common_name, absl::Duration validity) {
  FG_ASSIGN_OR_RETURN(OpenSslPtr<EVP_PKEY> key, NewKey());
  const absl::Time now = absl::Now();
  FG_ASSIGN_OR_RETURN(OpenSslPtr<X509> cert,
                      NewCertificate(key.get(), common_name,
                                     now - absl::Minutes(5), now + validity));
  X509* c = cert.get();
  if (X509_set_issuer_name(c, X509_get_subject_name(c)) != 1) {
    return OpenSslError("issuer name");
  }
  FG_RETURN_IF_ERROR(
      AddExtension(c, c, NID_basic_constraints, "critical,CA:TRUE"));
  FG_RETURN_IF_ERROR(
      AddExtension(c, c, NID_key_usage, "critical,keyCertSign,cRLSign"));
  FG_RETURN_IF_ERROR(AddExtension(c, c, NID_subject_key_identifier, "hash"));
  FG_RETURN_IF_ERROR(Sign(c, key.get()));
  return Encode(key.get(), c);
}

absl::StatusOr<KeyAndCert> IssueCertificate(const KeyAndCert& ca,
                                            const CertificateSpec& spec) {
  absl::StatusOr<OpenSslPtr<X509>> ca_cert = ParseCertificatePem(ca.cert_pem);
  if (!ca_cert.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CA certificate: ", ca_cert.status().message()));
  }
  FG_ASSIGN_OR_RETURN(OpenSslPtr<EVP_PKEY> ca_key, ParseKeyPem(ca.key_pem));
  std::vector<std::string> sans;
  for (const std::string& dns : spec.dns_names) sans.push_back("DNS:" + dns);
  for (const std::string& ip : spec.ip_addresses) {
    unsigned char buffer[16];
    if (inet_pton(AF_INET, ip.c_str(), buffer) != 1 &&
        inet_pton(AF_INET6, ip.c_str(), buffer) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", ip, "' is not an IP address"));
    }
    sans.push_back("IP:" + ip);
  }
  for (const std::string& uri : spec.uris) sans.push_back("URI:" + uri);
  for (const std::string& san : sans) {
    if (san.find(',') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "subject alternative name '", san, "' contains a comma"));
    }
  }

  FG_ASSIGN_OR_RETURN(OpenSslPtr<EVP_PKEY> key, NewKey());
  const absl::Time now = absl::Now();
  const absl::Time not_before = spec.not_before == absl::InfinitePast()
                                    ? now - absl::Minutes(5)
                                    : spec.not_before;
  const absl::Time not_after = spec.not_after == absl::InfiniteFuture()
                                   ? now + absl::Hours(24 * 365)
                                   : spec.not_after;
  FG_ASSIGN_OR_RETURN(
      OpenSslPtr<X509> cert,
      NewCertificate(key.get(), spec.common_name, not_before, not_after));
  X509* c = cert.get();
  X509* issuer = ca_cert->get();
  if (X509_set_issuer_name(c, X509_get_subject_name(issuer)) != 1) {
    return OpenSslError("issuer name");
  }
  FG_RETURN_IF_ERROR(
      AddExtension(c, issuer, NID_basic_constraints, "critical,CA:FALSE"));
  FG_RETURN_IF_ERROR(AddExtension(c, issuer, NID_key_usage,
                                  "critical,digitalSignature,keyEncipherment"));
  std::vector<std::string> usages;
  if (spec.server_auth) usages.push_back("serverAuth");
  if (spec.client_auth) usages.push_back("clientAuth");
  if (!usages.empty()) {
    FG_RETURN_IF_ERROR(
        AddExtension(c, issuer, NID_ext_key_usage, absl::StrJoin(usages, ",")));
  }
  if (!sans.empty()) {
    FG_RETURN_IF_ERROR(AddExtension(c, issuer, NID_subject_alt_name,
                                    absl::StrJoin(sans, ",")));
  }
  FG_RETURN_IF_ERROR(
      AddExtension(c, issuer, NID_subject_key_identifier, "hash"));
  FG_RETURN_IF_ERROR(
      AddExtension(c, issuer, NID_authority_key_identifier, "keyid:always"));
  FG_RETURN_IF_ERROR(Sign(c, ca_key.get()));
  return Encode(key.get(), c);
}

}  // namespace fedgather
