#include "client/nccl/unique_id.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace fedgather {

absl::StatusOr<NcclUniqueIdBytes> ShareFromRankZero(
    Group& group,
    const std::function<absl::StatusOr<NcclUniqueIdBytes>()>& create,
    const CollectiveOptions& options) {
  // Rank 0 sends the id, or (any other length) why it has none.
  std::string mine;
  if (group.rank() == 0) {
    absl::StatusOr<NcclUniqueIdBytes> id = create();
    if (id.ok()) {
      mine.assign(id->begin(), id->end());
    } else {
      mine =
          absl::StrCat("rank 0 (", group.identities()[0],
                       ") could not create the id: ", id.status().ToString());
      if (mine.size() == kNcclUniqueIdBytes) mine += '.';
    }
  }
  FG_ASSIGN_OR_RETURN(std::vector<std::string> gathered,
                      group.AllGatherBytes(mine, options));
  const std::string& sent = gathered[0];
  if (sent.size() != kNcclUniqueIdBytes) {
    return absl::FailedPreconditionError(
        sent.empty() ? std::string("rank 0 sent no id") : sent);
  }
  NcclUniqueIdBytes id;
  std::copy(sent.begin(), sent.end(), id.begin());
  return id;
}

}  // namespace fedgather
