#include "server/membership/group_config.h"

#include "absl/strings/str_cat.h"

namespace fedgather::server {

absl::Status NotAMemberError(absl::string_view identity,
                             absl::string_view group) {
  return absl::PermissionDeniedError(
      absl::StrCat("identity '", identity, "' may not use group '", group,
                   "' (no such group, or the identity is not a member)"));
}

}  // namespace fedgather::server
