// Certificate checks shared by the certificate and provisioning tests: parse
// PEM, and verify a leaf against one trusted CA the way a TLS peer would.
#ifndef FEDGATHER_TESTS_COMMON_X509_TEST_UTIL_H_
#define FEDGATHER_TESTS_COMMON_X509_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/x509_vfy.h>

#include <memory>
#include <string>
#include <vector>

#include "common/openssl_util.h"

namespace fedgather::x509_test {

inline OpenSslPtr<X509> ParseCert(const std::string& pem) {
  auto cert = ParseCertificatePem(pem);
  EXPECT_TRUE(cert.ok()) << cert.status();
  return cert.ok() ? *std::move(cert) : nullptr;
}

inline OpenSslPtr<EVP_PKEY> ParseKey(const std::string& pem) {
  OpenSslPtr<BIO> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return OpenSslPtr<EVP_PKEY>(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
}

struct StoreDeleter {
  void operator()(X509_STORE* p) const { X509_STORE_free(p); }
  void operator()(X509_STORE_CTX* p) const { X509_STORE_CTX_free(p); }
};

// VerifyError verifies `leaf_pem` against the single trusted `ca_pem` for
// `purpose` (0: any) and returns X509_V_OK or the verification error; -1 when
// either does not parse.
inline int VerifyError(const std::string& ca_pem, const std::string& leaf_pem,
                       int purpose = 0) {
  OpenSslPtr<X509> ca = ParseCert(ca_pem);
  OpenSslPtr<X509> leaf = ParseCert(leaf_pem);
  if (ca == nullptr || leaf == nullptr) return -1;
  std::unique_ptr<X509_STORE, StoreDeleter> store(X509_STORE_new());
  std::unique_ptr<X509_STORE_CTX, StoreDeleter> ctx(X509_STORE_CTX_new());
  if (X509_STORE_add_cert(store.get(), ca.get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), leaf.get(), nullptr) != 1) {
    return -1;
  }
  if (purpose != 0) X509_STORE_CTX_set_purpose(ctx.get(), purpose);
  const int ok = X509_verify_cert(ctx.get());
  const int error = X509_STORE_CTX_get_error(ctx.get());
  EXPECT_EQ(ok == 1, error == X509_V_OK);
  return error;
}

// Sans returns the SAN entries of `type` in order; IP addresses as bytes.
inline std::vector<std::string> Sans(X509* cert, int type) {
  std::vector<std::string> out;
  OpenSslPtr<GENERAL_NAMES> names(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
  for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names.get());
       ++i) {
    GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (name->type != type) continue;
    ASN1_STRING* s = type == GEN_IPADD ? name->d.iPAddress : name->d.ia5;
    out.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                     ASN1_STRING_length(s));
  }
  return out;
}

}  // namespace fedgather::x509_test

#endif  // FEDGATHER_TESTS_COMMON_X509_TEST_UTIL_H_
