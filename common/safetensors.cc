#include "common/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace fedgather {
namespace {

using nlohmann::json;

constexpr char kMetadataKey[] = "__metadata__";

absl::Status Bad(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

// Rejects duplicate keys at the top level of the header, which nlohmann's
// parser would otherwise silently merge.
absl::StatusOr<json> ParseHeaderJson(absl::string_view text,
                                     absl::string_view source) {
  std::vector<std::set<std::string>> keys_by_depth;
  std::string duplicate;
  json::parser_callback_t callback = [&](int depth, json::parse_event_t event,
                                         json& parsed) {
    if (event == json::parse_event_t::object_start) {
      if (keys_by_depth.size() <= static_cast<size_t>(depth)) {
        keys_by_depth.resize(depth + 1);
      }
      keys_by_depth[depth].clear();
    } else if (event == json::parse_event_t::key && depth == 1) {
      if (!keys_by_depth[0].insert(parsed.get<std::string>()).second &&
          duplicate.empty()) {
        duplicate = parsed.get<std::string>();
      }
    }
    return true;
  };
  json header = json::parse(text.begin(), text.end(), callback,
                            /*allow_exceptions=*/false);
  if (header.is_discarded()) return Bad(source, "the header is not valid JSON");
  if (!header.is_object()) return Bad(source, "the header is not a JSON object");
  if (!duplicate.empty()) {
    return Bad(source, absl::StrCat("tensor '", duplicate, "' appears twice"));
  }
  return header;
}

struct Range {
  uint64_t begin;
  uint64_t end;
  size_t index;
};

absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& name,
                                            const json& entry,
                                            absl::string_view source,
                                            Range* range) {
  const std::string where = absl::StrCat("tensor '", name, "'");
  if (!entry.is_object()) return Bad(source, absl::StrCat(where, " is not an object"));
  for (const auto& [key, value] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return Bad(source, absl::StrCat(where, " has unknown field '", key, "'"));
    }
  }
  if (!entry.contains("dtype") || !entry["dtype"].is_string()) {
    return Bad(source, absl::StrCat(where, " has no string 'dtype'"));
  }
  if (!entry.contains("shape") || !entry["shape"].is_array()) {
    return Bad(source, absl::StrCat(where, " has no 'shape' list"));
  }
  if (!entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
      entry["data_offsets"].size() != 2 ||
      !entry["data_offsets"][0].is_number_unsigned() ||
      !entry["data_offsets"][1].is_number_unsigned()) {
    return Bad(source, absl::StrCat(where,
                                    " needs 'data_offsets' of two unsigned "
                                    "integers"));
  }
  SafetensorsEntry out;
  out.spec.name = name;
  absl::StatusOr<DType> dtype = DTypeFromName(entry["dtype"].get<std::string>());
  if (!dtype.ok()) {
    return Bad(source, absl::StrCat(where, ": ", dtype.status().message()));
  }
  out.spec.dtype = *dtype;
  for (const json& dim : entry["shape"]) {
    if (!dim.is_number_integer()) {
      return Bad(source, absl::StrCat(where, " has a non-integer dimension"));
    }
    out.spec.shape.push_back(dim.get<int64_t>());
  }
  absl::StatusOr<int64_t> bytes = ByteSize(out.spec);
  if (!bytes.ok()) return Bad(source, bytes.status().message());
  range->begin = entry["data_offsets"][0].get<uint64_t>();
  range->end = entry["data_offsets"][1].get<uint64_t>();
  if (range->begin > range->end) {
    return Bad(source, absl::StrCat(where, " has data_offsets [", range->begin,
                                    ", ", range->end, "] with begin > end"));
  }
  if (range->end - range->begin != static_cast<uint64_t>(*bytes)) {
    return Bad(source,
               absl::StrCat(where, " (", SpecToString(out.spec), ") needs ",
                            *bytes, " bytes but data_offsets span ",
                            range->end - range->begin));
  }
  return out;
}

}  // namespace

absl::StatusOr<SafetensorsFile> SafetensorsFile::Parse(
    std::string bytes, absl::string_view source) {
  if (bytes.size() < 8) {
    return Bad(source, absl::StrCat("the file has ", bytes.size(),
                                    " bytes, fewer than the 8-byte header length"));
  }
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) {
    header_size = (header_size << 8) | static_cast<uint8_t>(bytes[i]);
  }
  if (header_size > kMaxSafetensorsHeaderBytes) {
    return Bad(source, absl::StrCat("the header length ", header_size,
                                    " exceeds the limit of ",
                                    kMaxSafetensorsHeaderBytes));
  }
  if (header_size > bytes.size() - 8) {
    return Bad(source, absl::StrCat("the header length ", header_size,
                                    " runs past the end of the ", bytes.size(),
                                    "-byte file (truncated?)"));
  }
  FG_ASSIGN_OR_RETURN(
      json header,
      ParseHeaderJson(absl::string_view(bytes).substr(8, header_size), source));

  SafetensorsFile file;
  const uint64_t data_size = bytes.size() - 8 - header_size;
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      if (!entry.is_object()) return Bad(source, "__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          return Bad(source, absl::StrCat("__metadata__ value of '", key,
                                          "' is not a string"));
        }
        file.metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    if (name.empty()) return Bad(source, "a tensor has an empty name");
    Range range{};
    FG_ASSIGN_OR_RETURN(SafetensorsEntry parsed,
                        ParseEntry(name, entry, source, &range));
    if (range.end > data_size) {
      return Bad(source, absl::StrCat("tensor '", name, "' ends at byte ",
                                      range.end, " of a ", data_size,
                                      "-byte data buffer (truncated?)"));
    }
    range.index = file.tensors_.size();
    ranges.push_back(range);
    file.tensors_.push_back(std::move(parsed));
  }
  // The ranges must tile the data buffer exactly.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (const Range& range : ranges) {
    const std::string& name = file.tensors_[range.index].spec.name;
    if (range.begin < covered) {
      return Bad(source, absl::StrCat("tensor '", name,
                                      "' overlaps the tensor before it"));
    }
    if (range.begin > covered) {
      return Bad(source, absl::StrCat("a hole of ", range.begin - covered,
                                      " bytes precedes tensor '", name, "'"));
    }
    covered = range.end;
  }
  if (covered != data_size) {
    return Bad(source, absl::StrCat(data_size - covered,
                                    " bytes follow the last tensor"));
  }
  file.bytes_ = std::make_unique<std::string>(std::move(bytes));
  const uint8_t* data =
      reinterpret_cast<const uint8_t*>(file.bytes_->data()) + 8 + header_size;
  for (const Range& range : ranges) {
    file.tensors_[range.index].data =
        absl::MakeConstSpan(data + range.begin, range.end - range.begin);
  }
  std::sort(file.tensors_.begin(), file.tensors_.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.spec.name < b.spec.name;
            });
  return file;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::ReadFile(
    const std::string& path) {
  FG_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  return Parse(std::move(bytes), path);
}

std::vector<ConstHostTensor> SafetensorsFile::Views() const {
  std::vector<ConstHostTensor> views;
  views.reserve(tensors_.size());
  for (const SafetensorsEntry& entry : tensors_) {
    views.push_back({entry.spec, entry.data.data()});
  }
  return views;
}

absl::StatusOr<std::string> SerializeSafetensors(
    absl::Span<const ConstHostTensor> tensors,
    const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::vector<int64_t> sizes;
  uint64_t offset = 0;
  for (const ConstHostTensor& tensor : tensors) {
    const std::string& name = tensor.spec.name;
    if (name.empty() || name == kMetadataKey) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid tensor name '", name, "'"));
    }
    if (header.contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' appears twice"));
    }
    FG_ASSIGN_OR_RETURN(const int64_t bytes, ByteSize(tensor.spec));
    header[name] = {{"dtype", std::string(DTypeName(tensor.spec.dtype))},
                    {"shape", tensor.spec.shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += static_cast<uint64_t>(bytes);
    sizes.push_back(bytes);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + text.size() + offset);
  uint64_t length = text.size();
  for (int i = 0; i < 8; ++i) {
    out.push_back(static_cast<char>(length & 0xff));
    length >>= 8;
  }
  out.append(text);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (sizes[i] == 0) continue;
    out.append(static_cast<const char*>(tensors[i].data),
               static_cast<size_t>(sizes[i]));
  }
  return out;
}

absl::Status WriteSafetensorsFile(
    const std::string& path, absl::Span<const ConstHostTensor> tensors,
    const std::map<std::string, std::string>& metadata) {
  FG_ASSIGN_OR_RETURN(const std::string bytes,
                      SerializeSafetensors(tensors, metadata));
  return WriteStringToFile(path, bytes);
}

}  // namespace fedgather
