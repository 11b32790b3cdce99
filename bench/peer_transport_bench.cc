// peer_transport_bench: what a link of the direct data plane (issue 21) would
// cost on each candidate transport. One end streams `--bytes` to the other
// over loopback, in `--message` pieces, as a ring link carries one chunk
// stream; the receiver puts every byte into its output buffer, as a
// collective's receiver does. Transports:
//   grpc_tls     a gRPC bidi stream of raw ByteBuffer messages over mutual TLS
//                (our credentials): the sender's messages are zero-copy
//                slices of its input, as the client's chunk frames are, and
//                the receiver copies each slice into its output
//   grpc_tls_tuned  the same with gRPC's framing sizes raised: TLS frames
//                (grpc.tsi.max_frame_size), HTTP/2 frames, its stream
//                lookahead and the TCP read chunks, on both ends
//   grpc_plain   the same as grpc_tls over an insecure channel
//   tls13_raw    OpenSSL TLS 1.3 on the TCP socket with the same certificates
//                (AES-128-GCM), SSL_write from the input and SSL_read
//                straight into the output (no copy of our own)
//   tcp_raw      write() and read() on the socket: the kernel's copies alone
// Both ends run in this process, each on its own threads; the CPU time is the
// process's (both ends), per GB moved. Prints CSV:
//   transport,bytes,message_bytes,seconds,GBps,cpu_s_per_GB
// one line per repetition (the median is for the reader).
#include <arpa/inet.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_callback.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/synchronization/notification.h"
#include "common/cert_issuer.h"
#include "common/tls_credentials.h"

namespace fedgather {
namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "peer_transport_bench: %s\n", what.c_str());
  ERR_print_errors_fp(stderr);
  std::exit(1);
}

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

struct Pki {
  KeyAndCert ca, server, client;
};

Pki MakePki() {
  Pki pki;
  absl::StatusOr<KeyAndCert> ca =
      CreateCertificateAuthority("peer-bench-ca", absl::Hours(1));
  if (!ca.ok()) Die(std::string(ca.status().message()));
  pki.ca = *ca;
  CertificateSpec server;
  server.common_name = "site-1";
  server.dns_names = {"localhost"};
  server.ip_addresses = {"127.0.0.1"};
  server.uris = {"spiffe://fedgather/site-1"};
  server.server_auth = server.client_auth = true;
  CertificateSpec client = server;
  client.common_name = "site-2";
  client.uris = {"spiffe://fedgather/site-2"};
  absl::StatusOr<KeyAndCert> s = IssueCertificate(pki.ca, server);
  absl::StatusOr<KeyAndCert> c = IssueCertificate(pki.ca, client);
  if (!s.ok() || !c.ok()) Die("issuing the certificates failed");
  pki.server = *s;
  pki.client = *c;
  return pki;
}

struct Run {
  double seconds = 0;
  double cpu = 0;
};

// ---- gRPC: one bidi stream, the sender writing, the receiver reading ------

constexpr char kMethod[] = "/peerbench.Link/Stream";

// The receiving end: copies every message's slices into `output`; finishes
// once `total` bytes have come.
class Receiver : public grpc::CallbackGenericService {
 public:
  Receiver(std::vector<uint8_t>* output, absl::Notification* done)
      : output_(output), done_(done) {}

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext*) override {
    return new Stream(this);
  }

 private:
  class Stream : public grpc::ServerGenericBidiReactor {
   public:
    explicit Stream(Receiver* owner) : owner_(owner) { StartRead(&buffer_); }
    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status::OK);
        return;
      }
      std::vector<grpc::Slice> slices;
      if (!buffer_.Dump(&slices).ok()) Die("a message did not dump");
      for (const grpc::Slice& slice : slices) {
        if (at_ + slice.size() > owner_->output_->size()) Die("too many bytes");
        std::memcpy(owner_->output_->data() + at_, slice.begin(), slice.size());
        at_ += slice.size();
      }
      if (at_ == owner_->output_->size()) owner_->done_->Notify();
      StartRead(&buffer_);
    }
    void OnDone() override { delete this; }

   private:
    Receiver* const owner_;
    grpc::ByteBuffer buffer_;
    size_t at_ = 0;
  };

  std::vector<uint8_t>* const output_;
  absl::Notification* const done_;
};

// The sending end: writes `input` as zero-copy slices of `message` bytes.
class Sender
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  Sender(grpc::GenericStub* stub, const std::vector<uint8_t>& input,
         size_t message)
      : input_(input), message_(message) {
    stub->PrepareBidiStreamingCall(&context_, kMethod, grpc::StubOptions(),
                                   this);
    WriteNext();
    StartCall();
  }
  void Wait() { ended_.WaitForNotification(); }

 private:
  static void NoUnref(void*) {}
  void WriteNext() {
    if (at_ == input_.size()) {
      StartWritesDone();
      return;
    }
    const size_t n = std::min(message_, input_.size() - at_);
    grpc::Slice slice(const_cast<uint8_t*>(input_.data() + at_), n, &NoUnref,
                      nullptr);
    buffer_ = grpc::ByteBuffer(&slice, 1);
    at_ += n;
    StartWrite(&buffer_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) Die("a gRPC write failed");
    WriteNext();
  }
  void OnDone(const grpc::Status& status) override {
    if (!status.ok()) Die("the gRPC stream failed: " + status.error_message());
    ended_.Notify();
  }

  const std::vector<uint8_t>& input_;
  const size_t message_;
  grpc::ClientContext context_;
  grpc::ByteBuffer buffer_;
  size_t at_ = 0;
  absl::Notification ended_;
};

// The channel and server arguments of grpc_tls_tuned.
template <typename SetInt>
void RaiseFramingSizes(SetInt set) {
  set(GRPC_ARG_TSI_MAX_FRAME_SIZE, 1 << 20);
  set(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, 1 << 20);
  set(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 << 20);
  set(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, 4 << 20);
  set(GRPC_ARG_TCP_READ_CHUNK_SIZE, 1 << 20);
  set(GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, 256 << 10);
  set(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 4 << 20);
}

Run RunGrpc(bool tls, bool tuned, const Pki& pki,
            const std::vector<uint8_t>& input, std::vector<uint8_t>* output,
            size_t message) {
  absl::Notification received;
  Receiver receiver(output, &received);
  TlsFiles server_files{pki.server.cert_pem, pki.server.key_pem,
                        pki.ca.cert_pem};
  TlsFiles client_files{pki.client.cert_pem, pki.client.key_pem,
                        pki.ca.cert_pem};
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0",
                           tls ? MakeServerCredentials(server_files)
                               : grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterCallbackGenericService(&receiver);
  builder.SetMaxReceiveMessageSize(-1);
  if (tuned) {
    RaiseFramingSizes([&](const char* key, int value) {
      builder.AddChannelArgument(key, value);
    });
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) Die("the gRPC server did not start");
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  args.SetSslTargetNameOverride("localhost");
  if (tuned) {
    RaiseFramingSizes(
        [&](const char* key, int value) { args.SetInt(key, value); });
  }
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                tls ? MakeChannelCredentials(client_files)
                                    : grpc::InsecureChannelCredentials(),
                                args);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 std::chrono::seconds(10))) {
    Die("the gRPC channel did not connect");
  }
  grpc::GenericStub stub(channel);
  const double cpu0 = CpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  Sender sender(&stub, input, message);
  received.WaitForNotification();
  const auto t1 = std::chrono::steady_clock::now();
  const double cpu1 = CpuSeconds();
  sender.Wait();
  server->Shutdown();
  return {std::chrono::duration<double>(t1 - t0).count(), cpu1 - cpu0};
}

// ---- raw sockets: TCP, and OpenSSL TLS 1.3 on it ----------------------------

// A connected pair of loopback TCP sockets: {sending end, receiving end}.
std::pair<int, int> SocketPair() {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (bind(listener, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) !=
          0) {
    Die("cannot listen on 127.0.0.1");
  }
  const int sending = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(sending, reinterpret_cast<sockaddr*>(&address), length) != 0) {
    Die("cannot connect");
  }
  const int receiving = accept(listener, nullptr, nullptr);
  close(listener);
  const int one = 1;
  setsockopt(sending, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return {sending, receiving};
}

void UsePem(SSL_CTX* ctx, const KeyAndCert& mine, const std::string& ca_pem) {
  BIO* cert_bio = BIO_new_mem_buf(mine.cert_pem.data(), -1);
  BIO* key_bio = BIO_new_mem_buf(mine.key_pem.data(), -1);
  BIO* ca_bio = BIO_new_mem_buf(ca_pem.data(), -1);
  X509* cert = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  X509* ca = PEM_read_bio_X509(ca_bio, nullptr, nullptr, nullptr);
  if (cert == nullptr || key == nullptr || ca == nullptr ||
      SSL_CTX_use_certificate(ctx, cert) != 1 ||
      SSL_CTX_use_PrivateKey(ctx, key) != 1 ||
      X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca) != 1) {
    Die("cannot load the certificates into OpenSSL");
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                     nullptr);
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256");
  X509_free(cert);
  X509_free(ca);
  EVP_PKEY_free(key);
  BIO_free(cert_bio);
  BIO_free(key_bio);
  BIO_free(ca_bio);
}

Run RunRaw(bool tls, const Pki& pki, const std::vector<uint8_t>& input,
           std::vector<uint8_t>* output, size_t message) {
  // Plain ints, not a structured binding: C++17 lambdas cannot capture one.
  const std::pair<int, int> sockets = SocketPair();
  const int sending = sockets.first;
  const int receiving = sockets.second;
  SSL_CTX* client_ctx = nullptr;
  SSL_CTX* server_ctx = nullptr;
  SSL* client = nullptr;
  SSL* server = nullptr;
  if (tls) {
    client_ctx = SSL_CTX_new(TLS_client_method());
    server_ctx = SSL_CTX_new(TLS_server_method());
    UsePem(client_ctx, pki.client, pki.ca.cert_pem);
    UsePem(server_ctx, pki.server, pki.ca.cert_pem);
    client = SSL_new(client_ctx);
    server = SSL_new(server_ctx);
    SSL_set_fd(client, sending);
    SSL_set_fd(server, receiving);
    std::thread accepting([&] {
      if (SSL_accept(server) != 1) Die("the TLS accept failed");
    });
    if (SSL_connect(client) != 1) Die("the TLS connect failed");
    accepting.join();
  }
  const double cpu0 = CpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  std::thread receiver([&] {
    size_t at = 0;
    while (at < output->size()) {
      const size_t want = std::min<size_t>(output->size() - at, 1 << 30);
      const long got =
          tls ? SSL_read(server, output->data() + at, static_cast<int>(want))
              : read(receiving, output->data() + at, want);
      if (got <= 0) Die("a read failed");
      at += static_cast<size_t>(got);
    }
  });
  for (size_t at = 0; at < input.size();) {
    const size_t n = std::min(message, input.size() - at);
    const long put =
        tls ? SSL_write(client, input.data() + at, static_cast<int>(n))
            : write(sending, input.data() + at, n);
    if (put <= 0) Die("a write failed");
    at += static_cast<size_t>(put);
  }
  receiver.join();
  const auto t1 = std::chrono::steady_clock::now();
  const double cpu1 = CpuSeconds();
  if (tls) {
    SSL_free(client);
    SSL_free(server);
    SSL_CTX_free(client_ctx);
    SSL_CTX_free(server_ctx);
  }
  close(sending);
  close(receiving);
  return {std::chrono::duration<double>(t1 - t0).count(), cpu1 - cpu0};
}

}  // namespace
}  // namespace fedgather

int main(int argc, char** argv) {
  using namespace fedgather;
  CLI::App app{"one link of a direct data plane, on each candidate transport"};
  size_t bytes = size_t{256} << 20;
  size_t message = size_t{1} << 20;
  int reps = 3;
  std::vector<std::string> transports = {"grpc_tls", "grpc_tls_tuned",
                                         "tls13_raw", "grpc_plain", "tcp_raw"};
  app.add_option("--bytes", bytes, "bytes per run");
  app.add_option("--message", message, "bytes per message or write");
  app.add_option("--reps", reps, "runs of each transport");
  app.add_option("--transports", transports, "which, in this order");
  CLI11_PARSE(app, argc, argv);

  const Pki pki = MakePki();
  std::vector<uint8_t> input(bytes);
  for (size_t i = 0; i < bytes; ++i) input[i] = static_cast<uint8_t>(i * 7);
  std::vector<uint8_t> output(bytes);
  std::printf("transport,bytes,message_bytes,seconds,GBps,cpu_s_per_GB\n");
  for (int rep = 0; rep < reps; ++rep) {
    for (const std::string& transport : transports) {
      std::fill(output.begin(), output.end(), 0);
      Run run;
      if (transport == "grpc_tls" || transport == "grpc_tls_tuned" ||
          transport == "grpc_plain") {
        run = RunGrpc(transport != "grpc_plain", transport == "grpc_tls_tuned",
                      pki, input, &output, message);
      } else if (transport == "tls13_raw" || transport == "tcp_raw") {
        run = RunRaw(transport == "tls13_raw", pki, input, &output, message);
      } else {
        Die("no transport " + transport);
      }
      if (output != input) Die(transport + " delivered other bytes");
      const double gb = static_cast<double>(bytes) / 1e9;
      std::printf("%s,%zu,%zu,%.4f,%.3f,%.3f\n", transport.c_str(), bytes,
                  message, run.seconds, gb / run.seconds, run.cpu / gb);
      std::fflush(stdout);
    }
  }
  return 0;
}
