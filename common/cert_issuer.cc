#include "common/cert_issuer.h"

#include <arpa/inet.h>
#include <openssl/asn1.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/openssl_util.h"
#include "common/status_macros.h"

namespace fedgather {
namespace {

// Holders for the types openssl_util.h has no deleter for.
struct GeneralNameDeleter {
  void operator()(GENERAL_NAME* p) const { GENERAL_NAME_free(p); }
};
using GeneralNamePtr = std::unique_ptr<GENERAL_NAME, GeneralNameDeleter>;
struct Asn1StringDeleter {
  void operator()(ASN1_STRING* p) const { ASN1_STRING_free(p); }
};
using Asn1StringPtr = std::unique_ptr<ASN1_STRING, Asn1StringDeleter>;
struct CrlDeleter {
  void operator()(X509_CRL* p) const { X509_CRL_free(p); }
  void operator()(X509_REVOKED* p) const { X509_REVOKED_free(p); }
};
using CrlPtr = std::unique_ptr<X509_CRL, CrlDeleter>;
using RevokedPtr = std::unique_ptr<X509_REVOKED, CrlDeleter>;
// ASN1_INTEGER and ASN1_TIME are both ASN1_STRING.
using Asn1IntegerPtr = Asn1StringPtr;
using Asn1TimePtr = Asn1StringPtr;

// NoPassphrase refuses to decrypt: an encrypted CA key is an error, never a
// prompt on the terminal (OpenSSL's default callback reads one).
int NoPassphrase(char*, int, int, void*) { return 0; }

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime(absl::RFC3339_sec, t, absl::UTCTimeZone());
}

// CheckCommonName rejects control characters; OpenSSL itself rejects a CN
// over 64 characters (ub-common-name) or one that is not UTF-8.
absl::Status CheckCommonName(const std::string& cn) {
  for (unsigned char c : cn) {
    if (c < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat("common name '", cn, "' holds a control character"));
    }
  }
  return absl::OkStatus();
}

// CheckSanText accepts non-empty printable ASCII without spaces, which is
// what a DNS name or URI in an IA5String SAN may hold.
absl::Status CheckSanText(absl::string_view kind, const std::string& value) {
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("empty SAN ", kind));
  }
  for (unsigned char c : value) {
    if (c <= 0x20 || c >= 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat("SAN ", kind, " '", value,
                       "' may hold only printable ASCII without spaces"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<OpenSslPtr<EVP_PKEY>> NewKey() {
  OpenSslPtr<EVP_PKEY> key(EVP_EC_gen("P-256"));
  if (key == nullptr) return OpenSslError("EC P-256 key generation");
  return key;
}

// AddExtension adds one extension given in OpenSSL's configuration syntax;
// only fixed values from this file are passed, never caller text.
absl::Status AddExtension(X509* cert, X509* issuer, int nid,
                          const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) {
    return OpenSslError(
        absl::StrCat("extension ", OBJ_nid2sn(nid), "=", value));
  }
  const int added = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return added == 1 ? absl::OkStatus() : OpenSslError("X509_add_ext");
}

absl::Status PushName(GENERAL_NAMES* names, int type, ASN1_STRING* value) {
  Asn1StringPtr owned(value);
  GeneralNamePtr name(GENERAL_NAME_new());
  if (owned == nullptr || name == nullptr) return OpenSslError("GENERAL_NAME");
  GENERAL_NAME_set0_value(name.get(), type, owned.release());
  if (sk_GENERAL_NAME_push(names, name.get()) <= 0) {
    return OpenSslError("sk_GENERAL_NAME_push");
  }
  name.release();  // Now owned by `names`.
  return absl::OkStatus();
}

absl::Status PushText(GENERAL_NAMES* names, int type, const std::string& text) {
  ASN1_IA5STRING* value = ASN1_IA5STRING_new();
  if (value != nullptr &&
      ASN1_STRING_set(value, text.data(), static_cast<int>(text.size())) != 1) {
    ASN1_IA5STRING_free(value);
    return OpenSslError("ASN1_STRING_set");
  }
  return PushName(names, type, value);
}

// BuildSubjectAltNames builds the SAN list of `spec` with OpenSSL's object
// API, so that no caller text is ever parsed as configuration syntax.
// Returns null when `spec` has no SANs.
absl::StatusOr<OpenSslPtr<GENERAL_NAMES>> BuildSubjectAltNames(
    const CertificateSpec& spec) {
  for (const std::string& dns : spec.dns_names) {
    FG_RETURN_IF_ERROR(CheckSanText("DNS name", dns));
  }
  for (const std::string& uri : spec.uris) {
    FG_RETURN_IF_ERROR(CheckSanText("URI", uri));
  }
  std::vector<std::string> ip_bytes;
  for (const std::string& ip : spec.ip_addresses) {
    unsigned char buffer[16];
    if (inet_pton(AF_INET, ip.c_str(), buffer) == 1) {
      ip_bytes.emplace_back(reinterpret_cast<char*>(buffer), 4);
    } else if (inet_pton(AF_INET6, ip.c_str(), buffer) == 1) {
      ip_bytes.emplace_back(reinterpret_cast<char*>(buffer), 16);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("'", ip, "' is not an IPv4 or IPv6 address"));
    }
  }
  if (spec.dns_names.empty() && ip_bytes.empty() && spec.uris.empty()) {
    return OpenSslPtr<GENERAL_NAMES>();
  }
  OpenSslPtr<GENERAL_NAMES> names(sk_GENERAL_NAME_new_null());
  if (names == nullptr) return OpenSslError("sk_GENERAL_NAME_new_null");
  for (const std::string& dns : spec.dns_names) {
    FG_RETURN_IF_ERROR(PushText(names.get(), GEN_DNS, dns));
  }
  for (const std::string& bytes : ip_bytes) {
    ASN1_OCTET_STRING* value = ASN1_OCTET_STRING_new();
    if (value != nullptr &&
        ASN1_OCTET_STRING_set(
            value, reinterpret_cast<const unsigned char*>(bytes.data()),
            static_cast<int>(bytes.size())) != 1) {
      ASN1_OCTET_STRING_free(value);
      return OpenSslError("ASN1_OCTET_STRING_set");
    }
    FG_RETURN_IF_ERROR(PushName(names.get(), GEN_IPADD, value));
  }
  for (const std::string& uri : spec.uris) {
    FG_RETURN_IF_ERROR(PushText(names.get(), GEN_URI, uri));
  }
  return names;
}

absl::Status SetRandomSerial(X509* cert) {
  OpenSslPtr<BIGNUM> serial(BN_new());
  if (serial == nullptr) return OpenSslError("BN_new");
  do {
    if (BN_rand(serial.get(), 128, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1) {
      return OpenSslError("BN_rand");
    }
  } while (BN_is_zero(serial.get()));  // RFC 5280 wants a positive serial.
  if (BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert)) ==
      nullptr) {
    return OpenSslError("BN_to_ASN1_INTEGER");
  }
  return absl::OkStatus();
}

absl::Status SetTime(ASN1_TIME* field, absl::Time t, absl::string_view which) {
  if (ASN1_TIME_set(field, absl::ToTimeT(t)) == nullptr) {
    return OpenSslError(
        absl::StrCat(which, " ", Rfc3339(t), " cannot be encoded"),
        absl::StatusCode::kInvalidArgument);
  }
  return absl::OkStatus();
}

// NewCertificate makes an unsigned version-3 certificate for `key`, subject
// CN `cn` (none when empty), with a random serial and the given window.
absl::StatusOr<OpenSslPtr<X509>> NewCertificate(EVP_PKEY* key,
                                                const std::string& cn,
                                                absl::Time not_before,
                                                absl::Time not_after) {
  if (not_after <= not_before) {
    return absl::InvalidArgumentError(
        absl::StrCat("not_after ", Rfc3339(not_after),
                     " is not after not_before ", Rfc3339(not_before)));
  }
  OpenSslPtr<X509> cert(X509_new());
  if (cert == nullptr) return OpenSslError("X509_new");
  if (X509_set_version(cert.get(), X509_VERSION_3) != 1) {
    return OpenSslError("X509_set_version");
  }
  FG_RETURN_IF_ERROR(SetRandomSerial(cert.get()));
  FG_RETURN_IF_ERROR(
      SetTime(X509_getm_notBefore(cert.get()), not_before, "not_before"));
  FG_RETURN_IF_ERROR(
      SetTime(X509_getm_notAfter(cert.get()), not_after, "not_after"));
  if (!cn.empty() && X509_NAME_add_entry_by_txt(
                         X509_get_subject_name(cert.get()), "CN", MBSTRING_UTF8,
                         reinterpret_cast<const unsigned char*>(cn.data()),
                         static_cast<int>(cn.size()), -1, 0) != 1) {
    // The value is the only thing that can be wrong here: too long, or not
    // UTF-8.
    return OpenSslError(absl::StrCat("common name '", cn, "'"),
                        absl::StatusCode::kInvalidArgument);
  }
  if (X509_set_pubkey(cert.get(), key) != 1) {
    return OpenSslError("X509_set_pubkey");
  }
  return cert;
}

absl::StatusOr<std::string> BioContents(BIO* bio) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  if (size < 0 || (size > 0 && data == nullptr)) {
    return OpenSslError("BIO_get_mem_data");
  }
  return std::string(data, static_cast<size_t>(size));
}

absl::StatusOr<KeyAndCert> Encode(EVP_PKEY* key, X509* cert) {
  OpenSslPtr<BIO> key_bio(BIO_new(BIO_s_mem()));
  OpenSslPtr<BIO> cert_bio(BIO_new(BIO_s_mem()));
  if (key_bio == nullptr || cert_bio == nullptr) return OpenSslError("BIO_new");
  // PEM_write_bio_PrivateKey writes PKCS#8 in OpenSSL 3.
  if (PEM_write_bio_PrivateKey(key_bio.get(), key, nullptr, nullptr, 0, nullptr,
                               nullptr) != 1) {
    return OpenSslError("PEM_write_bio_PrivateKey");
  }
  if (PEM_write_bio_X509(cert_bio.get(), cert) != 1) {
    return OpenSslError("PEM_write_bio_X509");
  }
  KeyAndCert out;
  FG_ASSIGN_OR_RETURN(out.key_pem, BioContents(key_bio.get()));
  FG_ASSIGN_OR_RETURN(out.cert_pem, BioContents(cert_bio.get()));
  return out;
}

absl::StatusOr<OpenSslPtr<EVP_PKEY>> ParseKeyPem(const std::string& pem) {
  OpenSslPtr<BIO> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return OpenSslError("BIO_new_mem_buf");
  OpenSslPtr<EVP_PKEY> key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (key == nullptr) {
    return OpenSslError("the CA key is not an unencrypted PEM private key",
                        absl::StatusCode::kInvalidArgument);
  }
  return key;
}

absl::Status Sign(X509* cert, EVP_PKEY* key) {
  return X509_sign(cert, key, EVP_sha256()) > 0 ? absl::OkStatus()
                                                : OpenSslError("X509_sign");
}

// A CA certificate with its matching private key.
struct LoadedCa {
  OpenSslPtr<X509> cert;
  OpenSslPtr<EVP_PKEY> key;
};

// LoadCa parses `ca` and checks that its key matches and that it is a CA.
absl::StatusOr<LoadedCa> LoadCa(const KeyAndCert& ca) {
  absl::StatusOr<OpenSslPtr<X509>> cert = ParseCertificatePem(ca.cert_pem);
  if (!cert.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CA certificate: ", cert.status().message()));
  }
  LoadedCa loaded;
  loaded.cert = *std::move(cert);
  FG_ASSIGN_OR_RETURN(loaded.key, ParseKeyPem(ca.key_pem));
  if (X509_check_private_key(loaded.cert.get(), loaded.key.get()) != 1) {
    return OpenSslError("the CA key does not match the CA certificate",
                        absl::StatusCode::kInvalidArgument);
  }
  if (X509_check_ca(loaded.cert.get()) == 0) {
    return absl::InvalidArgumentError(
        "the CA certificate is not a certificate authority");
  }
  return loaded;
}

std::string NameText(const X509_NAME* name) {
  OpenSslPtr<BIO> bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr ||
      X509_NAME_print_ex(bio.get(), name, 0, XN_FLAG_RFC2253) < 0) {
    return "?";
  }
  absl::StatusOr<std::string> text = BioContents(bio.get());
  return text.ok() ? *text : "?";
}

absl::StatusOr<std::string> SerialHex(const ASN1_INTEGER* serial) {
  OpenSslPtr<BIGNUM> bn(ASN1_INTEGER_to_BN(serial, nullptr));
  if (bn == nullptr) return OpenSslError("ASN1_INTEGER_to_BN");
  char* hex = BN_bn2hex(bn.get());
  if (hex == nullptr) return OpenSslError("BN_bn2hex");
  std::string out(hex);
  OPENSSL_free(hex);
  return out;
}

absl::StatusOr<CrlPtr> ParseCrlPem(absl::string_view pem) {
  OpenSslPtr<BIO> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return OpenSslError("BIO_new_mem_buf");
  CrlPtr crl(PEM_read_bio_X509_CRL(bio.get(), nullptr, nullptr, nullptr));
  if (crl == nullptr) {
    return OpenSslError("not a PEM CRL", absl::StatusCode::kInvalidArgument);
  }
  return crl;
}

// NextCrlNumber returns one more than the CRL number of `crl`, or 1 when it
// is null or has none.
absl::StatusOr<Asn1IntegerPtr> NextCrlNumber(X509_CRL* crl) {
  OpenSslPtr<BIGNUM> number(BN_new());
  if (number == nullptr) return OpenSslError("BN_new");
  if (crl != nullptr) {
    int found = 0;
    Asn1IntegerPtr current(static_cast<ASN1_INTEGER*>(
        X509_CRL_get_ext_d2i(crl, NID_crl_number, &found, nullptr)));
    if (current != nullptr &&
        ASN1_INTEGER_to_BN(current.get(), number.get()) == nullptr) {
      return OpenSslError("ASN1_INTEGER_to_BN");
    }
    if (current == nullptr && found != -1) {
      return OpenSslError("the existing CRL's CRL number does not decode",
                          absl::StatusCode::kInvalidArgument);
    }
  }
  if (BN_add_word(number.get(), 1) != 1) return OpenSslError("BN_add_word");
  Asn1IntegerPtr out(BN_to_ASN1_INTEGER(number.get(), nullptr));
  if (out == nullptr) return OpenSslError("BN_to_ASN1_INTEGER");
  return out;
}

}  // namespace

absl::StatusOr<KeyAndCert> CreateCertificateAuthority(
    const std::string& common_name, absl::Duration validity) {
  ERR_clear_error();  // So errors reported below are this call's own.
  if (common_name.empty()) {
    return absl::InvalidArgumentError("a CA needs a common name");
  }
  FG_RETURN_IF_ERROR(CheckCommonName(common_name));
  if (validity <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CA validity ", absl::FormatDuration(validity), " is not positive"));
  }
  FG_ASSIGN_OR_RETURN(OpenSslPtr<EVP_PKEY> key, NewKey());
  const absl::Time now = absl::Now();
  FG_ASSIGN_OR_RETURN(OpenSslPtr<X509> cert,
                      NewCertificate(key.get(), common_name,
                                     now - kDefaultBackdate, now + validity));
  X509* c = cert.get();
  if (X509_set_issuer_name(c, X509_get_subject_name(c)) != 1) {
    return OpenSslError("X509_set_issuer_name");
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
  ERR_clear_error();  // So errors reported below are this call's own.
  // Check everything the caller gave before generating a key.
  FG_ASSIGN_OR_RETURN(LoadedCa loaded, LoadCa(ca));
  X509* issuer = loaded.cert.get();
  const OpenSslPtr<EVP_PKEY>& ca_key = loaded.key;
  FG_RETURN_IF_ERROR(CheckCommonName(spec.common_name));
  FG_ASSIGN_OR_RETURN(OpenSslPtr<GENERAL_NAMES> sans,
                      BuildSubjectAltNames(spec));

  const absl::Time now = absl::Now();
  const absl::Time not_before = spec.not_before == absl::InfinitePast()
                                    ? now - kDefaultBackdate
                                    : spec.not_before;
  const absl::Time not_after = spec.not_after == absl::InfiniteFuture()
                                   ? now + kDefaultLeafValidity
                                   : spec.not_after;
  FG_ASSIGN_OR_RETURN(OpenSslPtr<EVP_PKEY> key, NewKey());
  FG_ASSIGN_OR_RETURN(
      OpenSslPtr<X509> cert,
      NewCertificate(key.get(), spec.common_name, not_before, not_after));
  X509* c = cert.get();
  if (X509_set_issuer_name(c, X509_get_subject_name(issuer)) != 1) {
    return OpenSslError("X509_set_issuer_name");
  }
  FG_RETURN_IF_ERROR(
      AddExtension(c, issuer, NID_basic_constraints, "critical,CA:FALSE"));
  FG_RETURN_IF_ERROR(AddExtension(c, issuer, NID_key_usage,
                                  "critical,digitalSignature,keyEncipherment"));
  if (spec.server_auth || spec.client_auth) {
    const char* usage = spec.server_auth && spec.client_auth
                            ? "serverAuth,clientAuth"
                        : spec.server_auth ? "serverAuth"
                                           : "clientAuth";
    FG_RETURN_IF_ERROR(AddExtension(c, issuer, NID_ext_key_usage, usage));
  }
  if (sans != nullptr &&
      X509_add1_ext_i2d(c, NID_subject_alt_name, sans.get(),
                        /*crit=*/0, X509V3_ADD_DEFAULT) != 1) {
    return OpenSslError("subjectAltName");
  }
  FG_RETURN_IF_ERROR(
      AddExtension(c, issuer, NID_subject_key_identifier, "hash"));
  // The key id when the CA has one, else the CA's issuer name and serial.
  FG_RETURN_IF_ERROR(
      AddExtension(c, issuer, NID_authority_key_identifier, "keyid,issuer"));
  FG_RETURN_IF_ERROR(Sign(c, ca_key.get()));
  return Encode(key.get(), c);
}

absl::StatusOr<std::string> IssueCrl(
    const KeyAndCert& ca, const std::vector<std::string>& revoked_cert_pems,
    absl::Time this_update, absl::Time next_update,
    const std::string& existing_crl_pem) {
  ERR_clear_error();  // So errors reported below are this call's own.
  FG_ASSIGN_OR_RETURN(LoadedCa loaded, LoadCa(ca));
  X509* issuer = loaded.cert.get();
  EVP_PKEY* issuer_key = X509_get0_pubkey(issuer);
  if (next_update <= this_update) {
    return absl::InvalidArgumentError(
        absl::StrCat("next_update ", Rfc3339(next_update),
                     " is not after this_update ", Rfc3339(this_update)));
  }

  CrlPtr existing;
  if (!existing_crl_pem.empty()) {
    absl::StatusOr<CrlPtr> parsed = ParseCrlPem(existing_crl_pem);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("existing CRL: ", parsed.status().message()));
    }
    existing = *std::move(parsed);
    if (X509_NAME_cmp(X509_CRL_get_issuer(existing.get()),
                      X509_get_subject_name(issuer)) != 0 ||
        X509_CRL_verify(existing.get(), issuer_key) != 1) {
      ERR_clear_error();
      return absl::InvalidArgumentError(
          absl::StrCat("the existing CRL (issuer ",
                       NameText(X509_CRL_get_issuer(existing.get())),
                       ") is not signed by the CA ",
                       NameText(X509_get_subject_name(issuer))));
    }
  }

  // Check every certificate before building anything.
  std::vector<OpenSslPtr<X509>> revoked;
  for (size_t i = 0; i < revoked_cert_pems.size(); ++i) {
    absl::StatusOr<OpenSslPtr<X509>> cert =
        ParseCertificatePem(revoked_cert_pems[i]);
    if (!cert.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "certificate ", i + 1, " to revoke: ", cert.status().message()));
    }
    X509* c = cert->get();
    if (X509_cmp(c, issuer) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "certificate ", i + 1, " to revoke is the CA certificate itself"));
    }
    if (X509_NAME_cmp(X509_get_issuer_name(c), X509_get_subject_name(issuer)) !=
            0 ||
        X509_verify(c, issuer_key) != 1) {
      ERR_clear_error();
      std::string serial = SerialHex(X509_get0_serialNumber(c)).value_or("?");
      return absl::InvalidArgumentError(absl::StrCat(
          "certificate ", i + 1, " to revoke (subject ",
          NameText(X509_get_subject_name(c)), ", serial ", serial, ", issuer ",
          NameText(X509_get_issuer_name(c)), ") was not issued by the CA ",
          NameText(X509_get_subject_name(issuer)),
          X509_NAME_cmp(X509_get_issuer_name(c),
                        X509_get_subject_name(issuer)) == 0
              ? " (same name, a different key: another CA)"
              : ""));
    }
    revoked.push_back(*std::move(cert));
  }

  CrlPtr crl(X509_CRL_new());
  if (crl == nullptr) return OpenSslError("X509_CRL_new");
  X509_CRL* c = crl.get();
  if (X509_CRL_set_version(c, X509_CRL_VERSION_2) != 1) {
    return OpenSslError("X509_CRL_set_version");
  }
  if (X509_CRL_set_issuer_name(c, X509_get_subject_name(issuer)) != 1) {
    return OpenSslError("X509_CRL_set_issuer_name");
  }
  Asn1TimePtr this_time(ASN1_TIME_new());
  Asn1TimePtr next_time(ASN1_TIME_new());
  if (this_time == nullptr || next_time == nullptr) {
    return OpenSslError("ASN1_TIME_new");
  }
  FG_RETURN_IF_ERROR(SetTime(this_time.get(), this_update, "this_update"));
  FG_RETURN_IF_ERROR(SetTime(next_time.get(), next_update, "next_update"));
  if (X509_CRL_set1_lastUpdate(c, this_time.get()) != 1 ||
      X509_CRL_set1_nextUpdate(c, next_time.get()) != 1) {
    return OpenSslError("X509_CRL_set1_lastUpdate");
  }

  // Entries: those already listed, then the new serials not among them.
  std::vector<const ASN1_INTEGER*> listed;
  if (existing != nullptr) {
    STACK_OF(X509_REVOKED)* entries = X509_CRL_get_REVOKED(existing.get());
    for (int i = 0; i < sk_X509_REVOKED_num(entries); ++i) {
      RevokedPtr entry(X509_REVOKED_dup(sk_X509_REVOKED_value(entries, i)));
      if (entry == nullptr) return OpenSslError("X509_REVOKED_dup");
      listed.push_back(X509_REVOKED_get0_serialNumber(entry.get()));
      if (X509_CRL_add0_revoked(c, entry.get()) != 1) {
        return OpenSslError("X509_CRL_add0_revoked");
      }
      entry.release();  // Now owned by the CRL.
    }
  }
  for (const OpenSslPtr<X509>& cert : revoked) {
    const ASN1_INTEGER* serial = X509_get0_serialNumber(cert.get());
    bool seen = false;
    for (const ASN1_INTEGER* other : listed) {
      seen = seen || ASN1_INTEGER_cmp(serial, other) == 0;
    }
    if (seen) continue;
    RevokedPtr entry(X509_REVOKED_new());
    if (entry == nullptr) return OpenSslError("X509_REVOKED_new");
    if (X509_REVOKED_set_serialNumber(entry.get(),
                                      const_cast<ASN1_INTEGER*>(serial)) != 1 ||
        X509_REVOKED_set_revocationDate(entry.get(), this_time.get()) != 1) {
      return OpenSslError("X509_REVOKED_set");
    }
    listed.push_back(X509_REVOKED_get0_serialNumber(entry.get()));
    if (X509_CRL_add0_revoked(c, entry.get()) != 1) {
      return OpenSslError("X509_CRL_add0_revoked");
    }
    entry.release();  // Now owned by the CRL.
  }

  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, nullptr, nullptr, c, 0);
  X509_EXTENSION* akid = X509V3_EXT_nconf_nid(
      nullptr, &ctx, NID_authority_key_identifier, "keyid:always");
  if (akid == nullptr) return OpenSslError("authorityKeyIdentifier");
  const int added = X509_CRL_add_ext(c, akid, -1);
  X509_EXTENSION_free(akid);
  if (added != 1) return OpenSslError("X509_CRL_add_ext");
  FG_ASSIGN_OR_RETURN(Asn1IntegerPtr number, NextCrlNumber(existing.get()));
  if (X509_CRL_add1_ext_i2d(c, NID_crl_number, number.get(), /*crit=*/0,
                            X509V3_ADD_DEFAULT) != 1) {
    return OpenSslError("crlNumber");
  }
  if (X509_CRL_sort(c) != 1) return OpenSslError("X509_CRL_sort");
  if (X509_CRL_sign(c, loaded.key.get(), EVP_sha256()) <= 0) {
    return OpenSslError("X509_CRL_sign");
  }
  OpenSslPtr<BIO> bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr) return OpenSslError("BIO_new");
  if (PEM_write_bio_X509_CRL(bio.get(), c) != 1) {
    return OpenSslError("PEM_write_bio_X509_CRL");
  }
  return BioContents(bio.get());
}

absl::StatusOr<std::string> CertificateSerialHex(absl::string_view cert_pem) {
  ERR_clear_error();
  FG_ASSIGN_OR_RETURN(OpenSslPtr<X509> cert, ParseCertificatePem(cert_pem));
  return SerialHex(X509_get0_serialNumber(cert.get()));
}

absl::StatusOr<std::vector<std::string>> CrlSerialsHex(
    absl::string_view crl_pem) {
  ERR_clear_error();
  FG_ASSIGN_OR_RETURN(CrlPtr crl, ParseCrlPem(crl_pem));
  std::vector<std::string> out;
  STACK_OF(X509_REVOKED)* entries = X509_CRL_get_REVOKED(crl.get());
  for (int i = 0; i < sk_X509_REVOKED_num(entries); ++i) {
    FG_ASSIGN_OR_RETURN(std::string serial,
                        SerialHex(X509_REVOKED_get0_serialNumber(
                            sk_X509_REVOKED_value(entries, i))));
    out.push_back(std::move(serial));
  }
  return out;
}

}  // namespace fedgather
