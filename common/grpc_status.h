// Conversions between absl::Status and grpc::Status. The codes map one to
// one; only the service layer and the client's RPC adapter call these.
// Every status the server sends goes through ToGrpcStatus, which cuts its
// message to kMaxStatusMessageBytes (common/bounded_text.h): a message may
// quote what a caller sent (a claimed identity, tensor names), and gRPC
// clients refuse trailers over 8 KiB by default.
#ifndef FEDGATHER_COMMON_GRPC_STATUS_H_
#define FEDGATHER_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "common/bounded_text.h"

namespace fedgather {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  const absl::Status bounded = BoundStatus(status);
  return grpc::Status(static_cast<grpc::StatusCode>(bounded.code()),
                      std::string(bounded.message()));
}

// The trailing metadata key of a Collective stream the server finished on
// purpose: "1" (the round's outcome; do not resume) or "retry" (resume again
// shortly). A stream that ends without it broke, and may be resumed.
inline constexpr char kFinalStatusKey[] = "fedgather-final";
inline constexpr char kFinalStatusRetry[] = "retry";

inline absl::Status FromGrpcStatus(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_GRPC_STATUS_H_
