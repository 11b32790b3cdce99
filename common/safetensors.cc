#include "common/safetensors.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace fedgather {
namespace {

using Json = nlohmann::json;

constexpr size_t kLengthPrefixBytes = 8;

// Legitimate headers nest at most: top object > entry object > shape array.
constexpr int kMaxJsonContainerDepth = 2;

uint64_t DecodeLittleEndian64(const char* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) {
    value = (value << 8) | static_cast<uint8_t>(p[i]);
  }
  return value;
}

void AppendLittleEndian64(uint64_t value, std::string* out) {
  for (int i = 0; i < 8; ++i) {
    out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
}

// Thrown from the JSON parser callback to stop parsing at the first structural
// problem; caught in ParseHeaderJson and never escapes this file.
struct HeaderStructureError {
  std::string message;
};

// ParseHeaderJson parses `text` strictly (no comments, no trailing content;
// the caller has already rejected NUL bytes, at which nlohmann stops) and
// rejects duplicate keys in any object, which nlohmann would otherwise
// silently collapse, and nesting deeper than a header can have.
absl::StatusOr<Json> ParseHeaderJson(absl::string_view text,
                                     absl::string_view source) {
  // seen[d] holds the keys of the object currently open at depth d.
  std::vector<std::set<std::string>> seen;
  std::string top_key;
  auto callback = [&](int depth, Json::parse_event_t event,
                      Json& parsed) -> bool {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (depth > kMaxJsonContainerDepth) {
          throw HeaderStructureError{absl::StrCat(
              "header JSON nests deeper than a safetensors header can",
              top_key.empty() ? ""
                              : absl::StrCat(" (inside '", top_key, "')"))};
        }
        if (event == Json::parse_event_t::object_start) {
          seen.resize(static_cast<size_t>(depth) + 1);
          seen.back().clear();
        }
        break;
      case Json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        const size_t object_depth = static_cast<size_t>(depth) - 1;
        if (depth < 1 || object_depth >= seen.size()) break;  // Not reached.
        if (!seen[object_depth].insert(key).second) {
          if (object_depth == 0) {
            throw HeaderStructureError{absl::StrCat(
                key == kSafetensorsMetadataKey ? "duplicate key '"
                                               : "duplicate tensor name '",
                key, "'")};
          }
          throw HeaderStructureError{absl::StrCat(
              "duplicate key '", key, "' in entry '", top_key, "'")};
        }
        if (object_depth == 0) top_key = key;
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), callback,
                       /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const HeaderStructureError& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", e.message));
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": header is not valid JSON: ", e.what()));
  }
}

absl::Status Invalid(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

absl::Status InvalidTensor(absl::string_view source, absl::string_view name,
                           absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": tensor '", name, "': ", what));
}

// A parsed entry before its byte range is checked against the others.
struct PendingEntry {
  TensorSpec spec;
  uint64_t begin = 0;
  uint64_t end = 0;
};

absl::StatusOr<std::map<std::string, std::string>> ParseMetadata(
    const Json& value, absl::string_view source) {
  if (!value.is_object()) {
    return Invalid(source, absl::StrCat("__metadata__ must be an object of "
                                        "strings, got ",
                                        value.type_name()));
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      return Invalid(
          source, absl::StrCat("__metadata__ value of '", key,
                               "' must be a string, got ", item.type_name()));
    }
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

absl::StatusOr<PendingEntry> ParseEntry(const std::string& name,
                                        const Json& value, uint64_t data_size,
                                        absl::string_view source) {
  if (name.empty()) return Invalid(source, "empty tensor name");
  if (name.size() > kMaxTensorNameBytes) {
    return Invalid(source, absl::StrCat("tensor name of ", name.size(),
                                        " bytes exceeds the limit of ",
                                        kMaxTensorNameBytes, ": '",
                                        name.substr(0, 64), "...'"));
  }
  if (!value.is_object()) {
    return InvalidTensor(
        source, name,
        absl::StrCat("entry must be an object, got ", value.type_name()));
  }
  for (auto it = value.begin(); it != value.end(); ++it) {
    const std::string& key = it.key();
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return InvalidTensor(source, name,
                           absl::StrCat("unknown key '", key, "' in entry"));
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(key)) {
      return InvalidTensor(source, name, absl::StrCat("missing ", key));
    }
  }

  PendingEntry entry;
  entry.spec.name = name;

  const Json& dtype = value.at("dtype");
  if (!dtype.is_string()) {
    return InvalidTensor(
        source, name,
        absl::StrCat("dtype must be a string, got ", dtype.type_name()));
  }
  absl::StatusOr<DType> parsed_dtype =
      DTypeFromName(dtype.get_ref<const std::string&>());
  if (!parsed_dtype.ok()) {
    return InvalidTensor(source, name, parsed_dtype.status().message());
  }
  entry.spec.dtype = *parsed_dtype;

  const Json& shape = value.at("shape");
  if (!shape.is_array()) {
    return InvalidTensor(
        source, name,
        absl::StrCat("shape must be an array, got ", shape.type_name()));
  }
  if (shape.size() > static_cast<size_t>(kMaxTensorRank)) {
    return InvalidTensor(source, name,
                         absl::StrCat("shape has rank ", shape.size(),
                                      ", above the limit of ", kMaxTensorRank));
  }
  for (const Json& dim : shape) {
    if (dim.is_number_unsigned()) {
      const uint64_t d = dim.get<uint64_t>();
      if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return InvalidTensor(
            source, name,
            absl::StrCat("shape dimension ", d, " does not fit in int64"));
      }
      entry.spec.shape.push_back(static_cast<int64_t>(d));
    } else if (dim.is_number_integer()) {
      return InvalidTensor(
          source, name,
          absl::StrCat("negative shape dimension ", dim.get<int64_t>()));
    } else {
      return InvalidTensor(source, name,
                           absl::StrCat("shape dimensions must be integers, "
                                        "got ",
                                        dim.type_name(), " ", dim.dump()));
    }
  }

  const Json& offsets = value.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2 ||
      !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
    return InvalidTensor(source, name,
                         absl::StrCat("data_offsets must be two unsigned "
                                      "integers [begin, end], got ",
                                      offsets.dump()));
  }
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  if (entry.begin > entry.end) {
    return InvalidTensor(source, name,
                         absl::StrCat("data_offsets begin ", entry.begin,
                                      " is after end ", entry.end));
  }
  if (entry.end > data_size) {
    return InvalidTensor(
        source, name,
        absl::StrCat("data_offsets end ", entry.end,
                     " is beyond the data buffer of ", data_size, " bytes"));
  }

  absl::StatusOr<int64_t> byte_size = ByteSize(entry.spec);
  if (!byte_size.ok()) {
    return Invalid(source, byte_size.status().message());
  }
  if (entry.end - entry.begin != static_cast<uint64_t>(*byte_size)) {
    return InvalidTensor(
        source, name,
        absl::StrCat("data_offsets [", entry.begin, ", ", entry.end, "] span ",
                     entry.end - entry.begin, " bytes but ",
                     SpecToString(entry.spec), " needs ", *byte_size));
  }
  return entry;
}

// CheckTiling requires the byte ranges, sorted, to cover [0, data_size)
// exactly: no overlap, no hole, nothing after the last tensor.
absl::Status CheckTiling(const std::vector<PendingEntry>& entries,
                         uint64_t data_size, absl::string_view source) {
  std::vector<const PendingEntry*> sorted;
  sorted.reserve(entries.size());
  for (const PendingEntry& e : entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(),
            [](const PendingEntry* a, const PendingEntry* b) {
              if (a->begin != b->begin) return a->begin < b->begin;
              if (a->end != b->end) return a->end < b->end;
              return a->spec.name < b->spec.name;
            });
  uint64_t expected = 0;
  const PendingEntry* previous = nullptr;
  for (const PendingEntry* e : sorted) {
    if (e->begin < expected) {
      return InvalidTensor(
          source, e->spec.name,
          absl::StrCat("data_offsets [", e->begin, ", ", e->end,
                       "] overlap tensor '", previous->spec.name, "' [",
                       previous->begin, ", ", previous->end, "]"));
    }
    if (e->begin > expected) {
      return InvalidTensor(
          source, e->spec.name,
          absl::StrCat("data_offsets begin ", e->begin,
                       " leaves a gap: the data before it ends at ", expected));
    }
    expected = e->end;
    previous = e;
  }
  if (expected != data_size) {
    return Invalid(
        source,
        absl::StrCat(data_size - expected,
                     " trailing bytes after the last tensor (data "
                     "buffer is ",
                     data_size, " bytes, tensors cover ", expected, ")"));
  }
  return absl::OkStatus();
}

// The bytes of one validated tensor, to follow the header.
struct Chunk {
  const uint8_t* data;
  uint64_t size;
};

// BuildHeader validates `tensors` and `metadata` and returns the length
// prefix plus padded JSON header; `chunks` receives the data to follow it.
absl::StatusOr<std::string> BuildHeader(
    absl::Span<const ConstHostTensor> tensors,
    const std::map<std::string, std::string>& metadata,
    std::vector<Chunk>* chunks) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[std::string(kSafetensorsMetadataKey)] = std::move(meta);
  }
  std::set<absl::string_view> names;
  uint64_t offset = 0;
  chunks->clear();
  chunks->reserve(tensors.size());
  for (const ConstHostTensor& tensor : tensors) {
    const std::string& name = tensor.spec.name;
    if (name.empty()) {
      return absl::InvalidArgumentError("safetensors: empty tensor name");
    }
    if (name == kSafetensorsMetadataKey) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor name '", name, "' is reserved"));
    }
    if (name.size() > kMaxTensorNameBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor name of ", name.size(),
                       " bytes exceeds the limit of ", kMaxTensorNameBytes));
    }
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: duplicate tensor name '", name, "'"));
    }
    FG_ASSIGN_OR_RETURN(const int64_t byte_size, ByteSize(tensor.spec));
    const uint64_t size = static_cast<uint64_t>(byte_size);
    if (size > 0 && tensor.data == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: tensor '", name, "' of ", size, " bytes has no data"));
    }
    if (offset > std::numeric_limits<uint64_t>::max() - size) {
      return absl::InvalidArgumentError(
          "safetensors: total tensor size overflows uint64");
    }
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = std::string(DTypeName(tensor.spec.dtype));
    entry["shape"] = tensor.spec.shape;
    entry["data_offsets"] = {offset, offset + size};
    header[name] = std::move(entry);
    chunks->push_back({static_cast<const uint8_t*>(tensor.data), size});
    offset += size;
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors: a tensor name or metadata string is not valid UTF-8: ",
        e.what()));
  }
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(kLengthPrefixBytes + json.size());
  AppendLittleEndian64(json.size(), &out);
  out.append(json);
  return out;
}

}  // namespace

absl::StatusOr<SafetensorsFile> SafetensorsFile::Parse(
    std::string bytes, absl::string_view source_name) {
  if (bytes.size() < kLengthPrefixBytes) {
    return Invalid(source_name, absl::StrCat("file is ", bytes.size(),
                                             " bytes, shorter than the 8-byte "
                                             "header length"));
  }
  const uint64_t header_size = DecodeLittleEndian64(bytes.data());
  if (header_size > kMaxSafetensorsHeaderBytes) {
    return Invalid(source_name, absl::StrCat("header length ", header_size,
                                             " exceeds the limit of ",
                                             kMaxSafetensorsHeaderBytes));
  }
  const uint64_t after_prefix = bytes.size() - kLengthPrefixBytes;
  if (header_size > after_prefix) {
    return Invalid(
        source_name,
        absl::StrCat("header length ", header_size, " is larger than the ",
                     after_prefix, " bytes after the length prefix"));
  }
  const uint64_t data_start = kLengthPrefixBytes + header_size;
  const uint64_t data_size = bytes.size() - data_start;

  const absl::string_view header_text(bytes.data() + kLengthPrefixBytes,
                                      static_cast<size_t>(header_size));
  // nlohmann stops at a NUL byte as at the end of input and would ignore what
  // follows; JSON text never holds a raw NUL, so reject it outright.
  if (const size_t nul = header_text.find('\0');
      nul != absl::string_view::npos) {
    return Invalid(
        source_name,
        absl::StrCat("header JSON holds a NUL byte at offset ", nul));
  }
  FG_ASSIGN_OR_RETURN(const Json header,
                      ParseHeaderJson(header_text, source_name));
  if (!header.is_object()) {
    return Invalid(
        source_name,
        absl::StrCat("header must be a JSON object, got ", header.type_name()));
  }

  SafetensorsFile file;
  std::vector<PendingEntry> pending;
  pending.reserve(header.size());
  // nlohmann::json objects iterate in ascending key order.
  for (const auto& [name, value] : header.items()) {
    if (name == kSafetensorsMetadataKey) {
      FG_ASSIGN_OR_RETURN(file.metadata_, ParseMetadata(value, source_name));
      continue;
    }
    FG_ASSIGN_OR_RETURN(PendingEntry entry,
                        ParseEntry(name, value, data_size, source_name));
    pending.push_back(std::move(entry));
  }
  FG_RETURN_IF_ERROR(CheckTiling(pending, data_size, source_name));

  file.bytes_ = std::make_unique<const std::string>(std::move(bytes));
  const uint8_t* data =
      reinterpret_cast<const uint8_t*>(file.bytes_->data()) + data_start;
  file.tensors_.reserve(pending.size());
  for (PendingEntry& entry : pending) {
    file.tensors_.push_back(
        {std::move(entry.spec),
         absl::Span<const uint8_t>(
             data + entry.begin,
             static_cast<size_t>(entry.end - entry.begin))});
  }
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
  std::vector<Chunk> chunks;
  FG_ASSIGN_OR_RETURN(const std::string header,
                      BuildHeader(tensors, metadata, &chunks));
  uint64_t total = header.size();
  for (const Chunk& chunk : chunks) {
    if (chunk.size > std::numeric_limits<size_t>::max() - total) {
      return absl::ResourceExhaustedError(
          "safetensors: file does not fit in memory");
    }
    total += chunk.size;
  }
  // One allocation for the whole file; the tensor data is copied once.
  std::string out;
  out.reserve(static_cast<size_t>(total));
  out.append(header);
  for (const Chunk& chunk : chunks) {
    if (chunk.size > 0) {
      out.append(reinterpret_cast<const char*>(chunk.data),
                 static_cast<size_t>(chunk.size));
    }
  }
  return out;
}

absl::Status WriteSafetensorsFile(
    const std::string& path, absl::Span<const ConstHostTensor> tensors,
    const std::map<std::string, std::string>& metadata) {
  std::vector<Chunk> chunks;
  absl::StatusOr<std::string> header = BuildHeader(tensors, metadata, &chunks);
  if (!header.ok()) {
    return absl::Status(header.status().code(),
                        absl::StrCat(path, ": ", header.status().message()));
  }
  // The tensor bytes go to the file straight from the caller's memory.
  std::vector<absl::string_view> pieces = {*header};
  for (const Chunk& chunk : chunks) {
    pieces.emplace_back(reinterpret_cast<const char*>(chunk.data),
                        static_cast<size_t>(chunk.size));
  }
  return WritePiecesToFile(path, pieces);
}

}  // namespace fedgather
