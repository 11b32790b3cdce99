#include "common/plaintext_credentials.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpcpp/create_channel.h>

#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

namespace fedgather {
namespace {

// CopyIdentityHeader is the server's core auth-metadata processor: it runs
// on every call, before the service sees it, and does not block.
void CopyIdentityHeader(void* /*state*/, grpc_auth_context* context,
                        const grpc_metadata* metadata, size_t count,
                        grpc_process_auth_metadata_done_cb done,
                        void* user_data) {
  for (size_t i = 0; i < count; ++i) {
    if (grpc_slice_str_cmp(metadata[i].key, kPlaintextIdentityHeader) != 0) {
      continue;
    }
    grpc_auth_context_add_property(
        context, kPlaintextIdentityProperty,
        reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(metadata[i].value)),
        GRPC_SLICE_LENGTH(metadata[i].value));
    done(user_data, &metadata[i], 1, nullptr, 0, GRPC_STATUS_OK, nullptr);
    return;
  }
  // No header: the call goes on without an identity, and AccessControl
  // refuses it with UNAUTHENTICATED saying so.
  done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
}

// gRPC 1.51's InsecureServerCredentials() refuses an auth-metadata
// processor, so these wrap the core insecure credentials themselves.
class PlaintextServerCredentials final : public grpc::ServerCredentials {
 public:
  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>& /*processor*/)
      override {
    // Replacing the identity processor would silently change who callers
    // are; no caller in fedgather does it.
    std::fprintf(stderr,
                 "PlaintextServerCredentials: SetAuthMetadataProcessor is not "
                 "supported\n");
    std::abort();
  }

 private:
  int AddPortToServer(const std::string& address,
                      grpc_server* server) override {
    grpc_server_credentials* credentials =
        grpc_insecure_server_credentials_create();
    grpc_server_credentials_set_auth_metadata_processor(
        credentials, {CopyIdentityHeader, nullptr, nullptr});
    const int port =
        grpc_server_add_http2_port(server, address.c_str(), credentials);
    grpc_server_credentials_release(credentials);
    return port;
  }
  bool IsInsecure() const override { return true; }
};

class IdentityHeaderInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit IdentityHeaderInterceptor(const std::string* identity)
      : identity_(identity) {}
  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kPlaintextIdentityHeader,
                                                 *identity_);
    }
    methods->Proceed();
  }

 private:
  const std::string* identity_;  // owned by the factory, which outlives calls
};

class IdentityHeaderFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit IdentityHeaderFactory(std::string identity)
      : identity_(std::move(identity)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new IdentityHeaderInterceptor(&identity_);
  }

 private:
  const std::string identity_;
};

// Channels made with these get plaintext and the identity interceptor.
class PlaintextChannelCredentials final : public grpc::ChannelCredentials {
 public:
  explicit PlaintextChannelCredentials(std::string identity)
      : identity_(std::move(identity)) {}

 protected:
  grpc::SecureChannelCredentials* AsSecureCredentials() override {
    return nullptr;
  }

 private:
  std::shared_ptr<grpc::Channel> CreateChannelImpl(
      const std::string& target, const grpc::ChannelArguments& args) override {
    return CreateChannelWithInterceptors(target, args, {});
  }
  std::shared_ptr<grpc::Channel> CreateChannelWithInterceptors(
      const std::string& target, const grpc::ChannelArguments& args,
      std::vector<std::unique_ptr<
          grpc::experimental::ClientInterceptorFactoryInterface>>
          creators) override {
    creators.insert(creators.begin(), MakeIdentityHeaderInterceptor(identity_));
    return grpc::experimental::CreateCustomChannelWithInterceptors(
        target, grpc::InsecureChannelCredentials(), args, std::move(creators));
  }
  bool IsInsecure() const override { return true; }

  const std::string identity_;
};

}  // namespace

std::shared_ptr<grpc::ServerCredentials> MakePlaintextServerCredentials() {
  return std::make_shared<PlaintextServerCredentials>();
}

std::shared_ptr<grpc::ChannelCredentials> MakePlaintextChannelCredentials(
    std::string identity) {
  return std::make_shared<PlaintextChannelCredentials>(std::move(identity));
}

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
MakeIdentityHeaderInterceptor(std::string identity) {
  return std::make_unique<IdentityHeaderFactory>(std::move(identity));
}

}  // namespace fedgather
