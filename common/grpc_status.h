// Conversions between absl::Status and grpc::Status. The codes map one to
// one; only the service layer and the client's RPC adapter call these.
#ifndef FEDGATHER_COMMON_GRPC_STATUS_H_
#define FEDGATHER_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace fedgather {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_GRPC_STATUS_H_
