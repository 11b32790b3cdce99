// Bounded text: a message built from input that a peer controls (tensor
// names, a rejected header's contents) is cut to a bound, visibly, before
// it goes into a status, a stored outcome, the audit log or the server log.
// Without it, one header of 4096 names of 1 KiB made a 4 MB failure message
// that every store kept (issue 18).
#ifndef FEDGATHER_COMMON_BOUNDED_TEXT_H_
#define FEDGATHER_COMMON_BOUNDED_TEXT_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace fedgather {

// The most bytes of a status message the server keeps or sends (what is
// cut says how much was).
inline constexpr size_t kMaxStatusMessageBytes = 4096;

// TruncateText returns `text` when it is at most `max_bytes` long; else its
// first bytes, cut at a UTF-8 character boundary, then "...(+N bytes)",
// the whole at most `max_bytes` plus that marker.
std::string TruncateText(absl::string_view text, size_t max_bytes);

// BoundStatus is `status` with its message cut by TruncateText to
// `max_bytes`; its code and payloads are kept.
absl::Status BoundStatus(const absl::Status& status,
                         size_t max_bytes = kMaxStatusMessageBytes);

// JoinBounded joins the first `max_items` of `items` with ", ", each cut to
// `max_item_bytes`, and says how many more there were: "a, b, ... and 7
// more".
std::string JoinBounded(const std::vector<absl::string_view>& items,
                        size_t max_items, size_t max_item_bytes);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_BOUNDED_TEXT_H_
