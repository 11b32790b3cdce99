#include "common/cert_verifier.h"

#include <openssl/asn1.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509_vfy.h>

#include <algorithm>
#include <ctime>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/openssl_util.h"
#include "common/peer_identity.h"
#include "common/status_macros.h"

namespace fedgather {
namespace {

struct VerifierDeleter {
  void operator()(X509_CRL* p) const { X509_CRL_free(p); }
  void operator()(X509_STORE* p) const { X509_STORE_free(p); }
  void operator()(X509_STORE_CTX* p) const { X509_STORE_CTX_free(p); }
  void operator()(STACK_OF(X509) * p) const { sk_X509_free(p); }
};
using CrlPtr = std::unique_ptr<X509_CRL, VerifierDeleter>;
using StorePtr = std::unique_ptr<X509_STORE, VerifierDeleter>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, VerifierDeleter>;
// Holds borrowed certificates: frees the stack, not its elements.
using CertStackPtr = std::unique_ptr<STACK_OF(X509), VerifierDeleter>;

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime(absl::RFC3339_sec, t, absl::UTCTimeZone());
}

absl::Time AsTime(const ASN1_TIME* t) {
  struct tm tm = {};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) {
    return absl::InfiniteFuture();
  }
  return absl::FromTimeT(timegm(&tm));
}

std::string NameText(const X509_NAME* name) {
  OpenSslPtr<BIO> bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr ||
      X509_NAME_print_ex(bio.get(), name, 0, XN_FLAG_RFC2253) < 0) {
    return "?";
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return size > 0 && data != nullptr
             ? std::string(data, static_cast<size_t>(size))
             : std::string();
}

std::string SerialHex(const ASN1_INTEGER* serial) {
  OpenSslPtr<BIGNUM> bn(ASN1_INTEGER_to_BN(serial, nullptr));
  char* hex = bn == nullptr ? nullptr : BN_bn2hex(bn.get());
  if (hex == nullptr) return "?";
  std::string out(hex);
  OPENSSL_free(hex);
  return out;
}

bool IsNoStartLine(unsigned long error) {
  return ERR_GET_LIB(error) == ERR_LIB_PEM &&
         ERR_GET_REASON(error) == PEM_R_NO_START_LINE;
}

// ReadAllCertificates parses every PEM certificate in `pem`, in order.
// INVALID_ARGUMENT, naming `what`, for a block that does not parse.
absl::StatusOr<std::vector<OpenSslPtr<X509>>> ReadAllCertificates(
    absl::string_view pem, absl::string_view what) {
  ERR_clear_error();
  OpenSslPtr<BIO> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return OpenSslError("BIO_new_mem_buf");
  std::vector<OpenSslPtr<X509>> out;
  while (true) {
    OpenSslPtr<X509> cert(
        PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (cert == nullptr) {
      if (IsNoStartLine(ERR_peek_last_error())) break;  // The end.
      return OpenSslError(absl::StrCat(what, ": certificate ", out.size() + 1,
                                       " does not parse"),
                          absl::StatusCode::kInvalidArgument);
    }
    out.push_back(std::move(cert));
  }
  ERR_clear_error();
  return out;
}

absl::StatusOr<std::vector<CrlPtr>> ReadAllCrls(absl::string_view pem) {
  ERR_clear_error();
  OpenSslPtr<BIO> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return OpenSslError("BIO_new_mem_buf");
  std::vector<CrlPtr> out;
  while (true) {
    CrlPtr crl(PEM_read_bio_X509_CRL(bio.get(), nullptr, nullptr, nullptr));
    if (crl == nullptr) {
      if (IsNoStartLine(ERR_peek_last_error())) break;  // The end.
      return OpenSslError(
          absl::StrCat("CRL ", out.size() + 1, " does not parse"),
          absl::StatusCode::kInvalidArgument);
    }
    out.push_back(std::move(crl));
  }
  ERR_clear_error();
  return out;
}

// IgnoreMissingAndStaleCrls is the verification callback. It lets through
// the CRL conditions the contract accepts: a CA with no loaded CRL (it
// revokes nothing) and a CRL outside its thisUpdate..nextUpdate window
// (still honoured: OpenSSL goes on to look the certificate up in it).
int IgnoreMissingAndStaleCrls(int ok, X509_STORE_CTX* ctx) {
  if (ok == 1) return 1;
  switch (X509_STORE_CTX_get_error(ctx)) {
    case X509_V_ERR_UNABLE_TO_GET_CRL:
    case X509_V_ERR_CRL_HAS_EXPIRED:
    case X509_V_ERR_CRL_NOT_YET_VALID:
      return 1;
    default:
      return 0;
  }
}

bool IsCa(X509* cert) {
  return (X509_get_extension_flags(cert) & EXFLAG_CA) != 0;
}

// NotForClientAuth says why `cert` fails the TLS client purpose.
std::string NotForClientAuth(X509* cert) {
  const uint32_t flags = X509_get_extension_flags(cert);
  if ((flags & EXFLAG_XKUSAGE) != 0 &&
      (X509_get_extended_key_usage(cert) & XKU_SSL_CLIENT) == 0) {
    return "is not for client authentication (its extendedKeyUsage lacks "
           "clientAuth)";
  }
  if ((flags & EXFLAG_KUSAGE) != 0 &&
      (X509_get_key_usage(cert) & (KU_DIGITAL_SIGNATURE | KU_KEY_AGREEMENT)) ==
          0) {
    return "is not for client authentication (its keyUsage lacks "
           "digitalSignature)";
  }
  return "is not for client authentication";
}

}  // namespace

struct ClientCertVerifier::State {
  std::string ca_name;
  StorePtr store;
  std::vector<OpenSslPtr<X509>> cas;
  std::vector<CrlPtr> crls;
  absl::Time crl_next_update = absl::InfiniteFuture();

  // What Verify accepted, by leaf and chain, with the window in which every
  // certificate of the verified chain is valid. The CAs and CRLs of a
  // verifier never change, so inside that window the same certificate gets
  // the same answer: Verify returns it without parsing and verifying again
  // (a server verifies the caller of every stream, and parsing PEM with
  // OpenSSL 3 took half of its CPU per small collective). Refusals are not
  // kept; at most kMaxVerified entries are, and the map is emptied when full.
  struct Verified {
    VerifiedCertificate certificate;
    absl::Time valid_from;
    absl::Time valid_until;
  };
  static constexpr size_t kMaxVerified = 1024;
  absl::Mutex verified_mu;
  std::unordered_map<std::string, Verified> verified
      ABSL_GUARDED_BY(verified_mu);

  // HasCaNamed says whether a trusted CA has subject `name`.
  bool HasCaNamed(const X509_NAME* name) const {
    for (const OpenSslPtr<X509>& ca : cas) {
      if (X509_NAME_cmp(X509_get_subject_name(ca.get()), name) == 0) {
        return true;
      }
    }
    return false;
  }

  // RevocationDate returns when a loaded CRL revoked `cert`, or
  // InfiniteFuture when none lists it.
  absl::Time RevocationDate(X509* cert) const {
    for (const CrlPtr& crl : crls) {
      if (X509_NAME_cmp(X509_CRL_get_issuer(crl.get()),
                        X509_get_issuer_name(cert)) != 0) {
        continue;
      }
      X509_REVOKED* entry = nullptr;
      if (X509_CRL_get0_by_cert(crl.get(), &entry, cert) == 1 &&
          entry != nullptr) {
        return AsTime(X509_REVOKED_get0_revocationDate(entry));
      }
    }
    return absl::InfiniteFuture();
  }
};

ClientCertVerifier::ClientCertVerifier(std::unique_ptr<State> state)
    : state_(std::move(state)) {}

ClientCertVerifier::~ClientCertVerifier() = default;

absl::StatusOr<std::unique_ptr<ClientCertVerifier>> ClientCertVerifier::Create(
    const std::string& ca_pem, const std::string& crl_pem,
    std::string ca_name) {
  auto state = std::make_unique<State>();
  state->ca_name = std::move(ca_name);
  FG_ASSIGN_OR_RETURN(state->cas, ReadAllCertificates(ca_pem, "client CA"));
  if (state->cas.empty()) {
    return absl::InvalidArgumentError("the client CA PEM holds no certificate");
  }
  state->store.reset(X509_STORE_new());
  if (state->store == nullptr) return OpenSslError("X509_STORE_new");
  for (size_t i = 0; i < state->cas.size(); ++i) {
    X509* ca = state->cas[i].get();
    if (!IsCa(ca)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "client CA certificate ", i + 1, " (",
          NameText(X509_get_subject_name(ca)),
          ") is not a certificate authority (no basicConstraints CA:TRUE)"));
    }
    if (X509_STORE_add_cert(state->store.get(), ca) != 1) {
      return OpenSslError("X509_STORE_add_cert");
    }
  }

  if (!crl_pem.empty()) {
    FG_ASSIGN_OR_RETURN(state->crls, ReadAllCrls(crl_pem));
    if (state->crls.empty()) {
      return absl::InvalidArgumentError("the CRL PEM holds no X509 CRL");
    }
  }
  for (size_t i = 0; i < state->crls.size(); ++i) {
    X509_CRL* crl = state->crls[i].get();
    bool signed_by_ca = false;
    for (const OpenSslPtr<X509>& ca : state->cas) {
      if (X509_NAME_cmp(X509_CRL_get_issuer(crl),
                        X509_get_subject_name(ca.get())) == 0 &&
          X509_CRL_verify(crl, X509_get0_pubkey(ca.get())) == 1) {
        signed_by_ca = true;
        break;
      }
    }
    ERR_clear_error();
    if (!signed_by_ca) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CRL ", i + 1, " (issuer ", NameText(X509_CRL_get_issuer(crl)),
          ") is not signed by any of the client CAs"));
    }
    if (X509_CRL_get0_nextUpdate(crl) != nullptr) {
      state->crl_next_update = std::min(state->crl_next_update,
                                        AsTime(X509_CRL_get0_nextUpdate(crl)));
    }
    if (X509_STORE_add_crl(state->store.get(), crl) != 1) {
      return OpenSslError("X509_STORE_add_crl");
    }
  }
  if (!state->crls.empty() &&
      X509_STORE_set_flags(state->store.get(),
                           X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL) !=
          1) {
    return OpenSslError("X509_STORE_set_flags");
  }
  X509_STORE_set_verify_cb(state->store.get(), IgnoreMissingAndStaleCrls);
  return std::unique_ptr<ClientCertVerifier>(
      new ClientCertVerifier(std::move(state)));
}

absl::StatusOr<VerifiedCertificate> ClientCertVerifier::Verify(
    absl::string_view cert_pem, absl::string_view chain_pem,
    absl::Time now) const {
  if (cert_pem.empty()) {
    return absl::UnauthenticatedError("no client certificate was presented");
  }
  const std::string key =
      absl::StrCat(cert_pem.size(), ":", cert_pem, chain_pem);
  {
    absl::MutexLock lock(&state_->verified_mu);
    auto it = state_->verified.find(key);
    if (it != state_->verified.end() && now >= it->second.valid_from &&
        now < it->second.valid_until) {
      return it->second.certificate;
    }
  }
  ERR_clear_error();
  absl::StatusOr<OpenSslPtr<X509>> parsed = ParseCertificatePem(cert_pem);
  if (!parsed.ok()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "the client certificate does not parse: ", parsed.status().message()));
  }
  X509* leaf = parsed->get();
  const std::string serial = SerialHex(X509_get0_serialNumber(leaf));
  const absl::StatusOr<std::string> identity =
      IdentityFromCertificatePem(cert_pem);
  const std::string prefix =
      identity.ok() ? absl::StrCat("client certificate '", *identity,
                                   "' (serial ", serial, ")")
                    : absl::StrCat("client certificate (serial ", serial, ")");
  auto refuse = [&prefix](absl::string_view reason) {
    return absl::UnauthenticatedError(absl::StrCat(prefix, " ", reason));
  };

  absl::StatusOr<std::vector<OpenSslPtr<X509>>> chain =
      ReadAllCertificates(chain_pem, "certificate chain");
  if (!chain.ok()) {
    return refuse(absl::StrCat("came with a chain that does not parse: ",
                               chain.status().message()));
  }
  CertStackPtr untrusted(sk_X509_new_null());
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (untrusted == nullptr || ctx == nullptr) {
    return OpenSslError("X509_STORE_CTX_new");
  }
  for (const OpenSslPtr<X509>& cert : *chain) {
    if (sk_X509_push(untrusted.get(), cert.get()) <= 0) {
      return OpenSslError("sk_X509_push");
    }
  }
  if (X509_STORE_CTX_init(ctx.get(), state_->store.get(), leaf,
                          untrusted.get()) != 1 ||
      X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_CLIENT) != 1) {
    return OpenSslError("X509_STORE_CTX_init");
  }
  X509_VERIFY_PARAM_set_time(X509_STORE_CTX_get0_param(ctx.get()),
                             absl::ToTimeT(now));

  if (X509_verify_cert(ctx.get()) != 1) {
    const int error = X509_STORE_CTX_get_error(ctx.get());
    const int depth = X509_STORE_CTX_get_error_depth(ctx.get());
    X509* at = X509_STORE_CTX_get_current_cert(ctx.get());
    ERR_clear_error();
    if (at == nullptr) at = leaf;
    // For an error found on a CA certificate of the chain, not the leaf.
    const std::string ca_text = absl::StrCat(
        "chains to CA certificate '", NameText(X509_get_subject_name(at)),
        "' (serial ", SerialHex(X509_get0_serialNumber(at)), ")");
    switch (error) {
      case X509_V_ERR_CERT_HAS_EXPIRED:
        return refuse(absl::StrCat(depth == 0 ? "" : ca_text + ", which ",
                                   "expired at ",
                                   Rfc3339(AsTime(X509_get0_notAfter(at)))));
      case X509_V_ERR_CERT_NOT_YET_VALID:
        return refuse(absl::StrCat(depth == 0 ? "" : ca_text + ", which ",
                                   "is not valid until ",
                                   Rfc3339(AsTime(X509_get0_notBefore(at)))));
      case X509_V_ERR_CERT_REVOKED: {
        const absl::Time when = state_->RevocationDate(at);
        const std::string date = when == absl::InfiniteFuture()
                                     ? std::string()
                                     : absl::StrCat(" on ", Rfc3339(when));
        if (depth == 0) {
          return refuse(
              absl::StrCat("was revoked (serial ", serial, ")", date));
        }
        return refuse(absl::StrCat(ca_text, ", which was revoked", date));
      }
      case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
      case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
      case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
      case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
      case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
      case X509_V_ERR_CERT_SIGNATURE_FAILURE:
      case X509_V_ERR_CERT_UNTRUSTED:
      case X509_V_ERR_CERT_REJECTED:
        return refuse(
            absl::StrCat("is not issued by ", state_->ca_name,
                         " (issuer: ", NameText(X509_get_issuer_name(leaf)),
                         state_->HasCaNamed(X509_get_issuer_name(leaf))
                             ? absl::StrCat(", a different key from ",
                                            state_->ca_name, " of that name)")
                             : ")"));
      case X509_V_ERR_INVALID_PURPOSE:
        if (depth == 0) {
          return refuse(IsCa(leaf)
                            ? "is a CA certificate, not a client certificate"
                            : NotForClientAuth(leaf));
        }
        return refuse(
            absl::StrCat(ca_text, ", which is not for client authentication"));
      default:
        return refuse(absl::StrCat(
            "failed verification: ", X509_verify_cert_error_string(error),
            depth == 0 ? std::string() : absl::StrCat(" (at ", ca_text, ")")));
    }
  }
  if (IsCa(leaf)) {
    return refuse("is a CA certificate, not a client certificate");
  }
  if (!identity.ok()) {
    return refuse(absl::StrCat("carries no usable identity: ",
                               identity.status().message()));
  }
  VerifiedCertificate out;
  out.identity = *identity;
  out.serial_hex = serial;
  out.subject = NameText(X509_get_subject_name(leaf));
  out.not_before = AsTime(X509_get0_notBefore(leaf));
  out.not_after = AsTime(X509_get0_notAfter(leaf));
  State::Verified verified{out, absl::InfinitePast(), absl::InfiniteFuture()};
  STACK_OF(X509)* path = X509_STORE_CTX_get0_chain(ctx.get());
  for (int i = 0; path != nullptr && i < sk_X509_num(path); ++i) {
    X509* cert = sk_X509_value(path, i);
    verified.valid_from =
        std::max(verified.valid_from, AsTime(X509_get0_notBefore(cert)));
    verified.valid_until =
        std::min(verified.valid_until, AsTime(X509_get0_notAfter(cert)));
  }
  absl::MutexLock lock(&state_->verified_mu);
  if (state_->verified.size() >= State::kMaxVerified) {
    state_->verified.clear();
  }
  state_->verified.insert_or_assign(key, std::move(verified));
  return out;
}

absl::Time ClientCertVerifier::crl_next_update() const {
  return state_->crl_next_update;
}

int ClientCertVerifier::crl_count() const {
  return static_cast<int>(state_->crls.size());
}

std::string ClaimedIdentity(absl::string_view cert_pem) {
  if (cert_pem.empty()) return "";
  absl::StatusOr<std::string> identity = IdentityFromCertificatePem(cert_pem);
  return identity.ok() ? *identity : "";
}

}  // namespace fedgather
