#include "common/bounded_text.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace fedgather {

std::string TruncateText(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;
  // Back up over continuation bytes (10xxxxxx) to a character's start.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  return absl::StrCat(text.substr(0, cut), "...(+", text.size() - cut,
                      " bytes)");
}

absl::Status BoundStatus(const absl::Status& status, size_t max_bytes) {
  if (status.message().size() <= max_bytes) return status;
  absl::Status bounded(status.code(),
                       TruncateText(status.message(), max_bytes));
  status.ForEachPayload(
      [&](absl::string_view type_url, const absl::Cord& payload) {
        bounded.SetPayload(type_url, payload);
      });
  return bounded;
}

std::string JoinBounded(const std::vector<absl::string_view>& items,
                        size_t max_items, size_t max_item_bytes) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < max_items; ++i) {
    if (i > 0) out.append(", ");
    out.append(TruncateText(items[i], max_item_bytes));
  }
  if (items.size() > max_items) {
    absl::StrAppend(&out, ", ... and ", items.size() - max_items, " more");
  }
  return out;
}

}  // namespace fedgather
