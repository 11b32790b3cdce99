// AdminService: the gRPC Admin service: group status, aborting a group's
// rounds, and reloading the access policy. Every call is authenticated by
// its client certificate and authorized by the policy (AccessControl), and
// audited, refusals included.
//
// Threading: unary callback methods; each answers before it returns. A
// reload reads the policy and CRL files on the calling gRPC thread.
#ifndef FEDGATHER_SERVER_RPC_ADMIN_SERVICE_H_
#define FEDGATHER_SERVER_RPC_ADMIN_SERVICE_H_

#include "common/clock.h"
#include "fedgather/v1/fedgather.grpc.pb.h"
#include "server/access/access_control.h"
#include "server/membership/group_registry.h"

namespace fedgather::server {

class AdminService : public v1::Admin::CallbackService {
 public:
  // `registry` and `access` must outlive the service.
  // `clock` dates the status replies; it must outlive the service.
  AdminService(GroupRegistry* registry, AccessControl* access,
               Clock* clock = SystemClock());

  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const v1::StatusRequest* request,
                                      v1::StatusReply* reply) override;
  grpc::ServerUnaryReactor* AbortRound(grpc::CallbackServerContext* context,
                                       const v1::AbortRoundRequest* request,
                                       v1::AbortRoundReply* reply) override;
  grpc::ServerUnaryReactor* ReloadPolicy(grpc::CallbackServerContext* context,
                                         const v1::ReloadPolicyRequest* request,
                                         v1::ReloadPolicyReply* reply) override;

 private:
  absl::Status Status(const Caller& caller, const v1::StatusRequest& request,
                      v1::StatusReply* reply);
  absl::Status Abort(const Caller& caller, const v1::AbortRoundRequest& request,
                     v1::AbortRoundReply* reply);
  absl::Status Reload(const Caller& caller, v1::ReloadPolicyReply* reply);

  GroupRegistry* const registry_;
  AccessControl* const access_;
  Clock* const clock_;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_RPC_ADMIN_SERVICE_H_
