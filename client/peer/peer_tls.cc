#include "client/peer/peer_tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/openssl_util.h"
#include "common/peer_identity.h"

namespace fedgather {
namespace {

// The chain is verified after the handshake (ClientCertVerifier), with
// reasons; the handshake only collects it.
int CollectChain(int /*preverified*/, X509_STORE_CTX* /*context*/) { return 1; }

std::string CertificatePem(X509* cert) {
  OpenSslPtr<BIO> bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || PEM_write_bio_X509(bio.get(), cert) != 1) return "";
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return size > 0 ? std::string(data, static_cast<size_t>(size)) : "";
}

}  // namespace

absl::StatusOr<std::shared_ptr<const PeerTls>> PeerTls::Create(
    const TlsFiles& tls, const std::string& crl_pem) {
  if (tls.insecure_plaintext_for_benchmarks) {
    return absl::InvalidArgumentError(
        "peer links need TLS; plaintext is for the relay's benchmarks only");
  }
  // A write to a link whose other end is gone must fail, not kill the
  // process: OpenSSL writes with write(2), which raises SIGPIPE.
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 &&
      current.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
  std::shared_ptr<PeerTls> peer_tls(new PeerTls());
  absl::StatusOr<std::string> identity =
      IdentityFromCertificatePem(tls.cert_pem);
  if (!identity.ok()) return identity.status();
  peer_tls->identity_ = *identity;
  absl::StatusOr<std::unique_ptr<ClientCertVerifier>> verifier =
      ClientCertVerifier::Create(tls.ca_pem, crl_pem, "the federation CA");
  if (!verifier.ok()) return verifier.status();
  peer_tls->verifier_ = *std::move(verifier);

  SSL_CTX* context = SSL_CTX_new(TLS_method());
  if (context == nullptr) return OpenSslError("SSL_CTX_new");
  peer_tls->context_ = context;
  absl::StatusOr<OpenSslPtr<X509>> cert = ParseCertificatePem(tls.cert_pem);
  if (!cert.ok()) return cert.status();
  OpenSslPtr<BIO> key_bio(BIO_new_mem_buf(
      tls.key_pem.data(), static_cast<int>(tls.key_pem.size())));
  OpenSslPtr<EVP_PKEY> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return OpenSslError("the member's private key does not load",
                        absl::StatusCode::kInvalidArgument);
  }
  if (SSL_CTX_use_certificate(context, cert->get()) != 1 ||
      SSL_CTX_use_PrivateKey(context, key.get()) != 1 ||
      SSL_CTX_check_private_key(context) != 1) {
    return OpenSslError("the member's certificate and key do not go together",
                        absl::StatusCode::kInvalidArgument);
  }
  SSL_CTX_set_min_proto_version(context, TLS1_3_VERSION);
  SSL_CTX_set_ciphersuites(context,
                           "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                           "TLS_CHACHA20_POLY1305_SHA256");
  SSL_CTX_set_num_tickets(context, 0);
  SSL_CTX_set_session_cache_mode(context, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_options(context, SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_verify(context, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                     CollectChain);
  return std::shared_ptr<const PeerTls>(std::move(peer_tls));
}

PeerTls::~PeerTls() { SSL_CTX_free(context_); }

absl::StatusOr<std::unique_ptr<PeerLink>> PeerTls::Handshake(
    PeerSocket socket, Role role, absl::Time deadline,
    const std::string& name) const {
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(context_), SSL_free);
  if (ssl == nullptr) return OpenSslError("SSL_new");
  if (SSL_set_fd(ssl.get(), socket.fd()) != 1) {
    return OpenSslError("SSL_set_fd");
  }
  for (;;) {
    ERR_clear_error();
    const int result =
        role == Role::kDialer ? SSL_connect(ssl.get()) : SSL_accept(ssl.get());
    if (result == 1) break;
    const int error = SSL_get_error(ssl.get(), result);
    if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) {
      char text[256] = "";
      ERR_error_string_n(ERR_get_error(), text, sizeof text);
      ERR_clear_error();
      return absl::UnavailableError(
          absl::StrCat(name, ": the TLS handshake failed (", text, ")"));
    }
    absl::Status ready =
        WaitFor(socket.fd(), error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT,
                deadline, absl::StrCat(name, ": the TLS handshake"));
    if (!ready.ok()) return ready;
  }
  X509* leaf = SSL_get0_peer_certificate(ssl.get());
  std::string chain_pem;
  if (STACK_OF(X509)* chain = SSL_get_peer_cert_chain(ssl.get())) {
    for (int i = 0; i < sk_X509_num(chain); ++i) {
      chain_pem += CertificatePem(sk_X509_value(chain, i));
    }
  }
  absl::StatusOr<VerifiedCertificate> verified = verifier_->Verify(
      leaf == nullptr ? "" : CertificatePem(leaf), chain_pem, absl::Now());
  if (!verified.ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat(name, ": ", verified.status().message()));
  }
  return std::make_unique<PeerLink>(std::move(socket), ssl.release(),
                                    *std::move(verified), name);
}

}  // namespace fedgather
