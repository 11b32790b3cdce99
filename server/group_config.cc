#include "server/group_config.h"

#include <yaml-cpp/yaml.h>

#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace fedgather::server {
namespace {

absl::Status ValidateGroup(const GroupConfig& group, absl::string_view where) {
  if (group.name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": a group has no name"));
  }
  if (group.world_size < 1 || group.world_size > kMaxWorldSize) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": group '", group.name, "' has world_size ",
                     group.world_size, "; it must be 1..", kMaxWorldSize));
  }
  if (static_cast<int>(group.members.size()) < group.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": group '", group.name, "' has world_size ", group.world_size,
        " but only ", group.members.size(), " members"));
  }
  std::set<std::string> seen;
  for (const std::string& member : group.members) {
    if (member.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": group '", group.name, "' lists an empty identity"));
    }
    if (!seen.insert(member).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": group '", group.name, "' lists '", member, "' twice"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<GroupConfig> GroupFromYaml(const YAML::Node& node,
                                          absl::string_view where) {
  if (!node.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": each group must be a mapping"));
  }
  GroupConfig group;
  for (const auto& item : node) {
    const std::string key = item.first.as<std::string>();
    if (key == "name") {
      group.name = item.second.as<std::string>();
    } else if (key == "world_size") {
      group.world_size = item.second.as<int>();
    } else if (key == "members") {
      if (!item.second.IsSequence()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": 'members' must be a list of identities"));
      }
      for (const auto& member : item.second) {
        group.members.push_back(member.as<std::string>());
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unknown key '", key, "' in a group"));
    }
  }
  FG_RETURN_IF_ERROR(ValidateGroup(group, where));
  return group;
}

}  // namespace

absl::StatusOr<std::vector<GroupConfig>> ParseGroupsYaml(
    absl::string_view yaml, absl::string_view source) {
  std::vector<GroupConfig> groups;
  try {
    const YAML::Node root = YAML::Load(std::string(yaml));
    if (!root.IsMap() || !root["groups"] || !root["groups"].IsSequence()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": expected a top-level 'groups:' list"));
    }
    for (const auto& item : root) {
      if (item.first.as<std::string>() != "groups") {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": unknown top-level key '",
                         item.first.as<std::string>(), "'"));
      }
    }
    std::set<std::string> names;
    for (const auto& node : root["groups"]) {
      FG_ASSIGN_OR_RETURN(GroupConfig group, GroupFromYaml(node, source));
      if (!names.insert(group.name).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            source, ": group '", group.name, "' is defined twice"));
      }
      groups.push_back(std::move(group));
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", e.what()));
  }
  return groups;
}

absl::StatusOr<std::vector<GroupConfig>> LoadGroupsFile(
    const std::string& path) {
  FG_ASSIGN_OR_RETURN(const std::string yaml, ReadFileToString(path));
  return ParseGroupsYaml(yaml, path);
}

absl::Status NotAMemberError(absl::string_view identity,
                             absl::string_view group) {
  return absl::PermissionDeniedError(
      absl::StrCat("identity '", identity, "' may not use group '", group,
                   "' (no such group, or the identity is not a member)"));
}

absl::StatusOr<GroupConfig> ParseGroupFlag(absl::string_view flag) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--group '", flag, "': ", why,
                     "; expected NAME:WORLD_SIZE=ID1,ID2,..."));
  };
  const size_t colon = flag.find(':');
  const size_t equals = flag.find('=');
  if (colon == absl::string_view::npos || equals == absl::string_view::npos ||
      equals < colon) {
    return bad("missing ':' or '='");
  }
  GroupConfig group;
  group.name = std::string(flag.substr(0, colon));
  if (!absl::SimpleAtoi(flag.substr(colon + 1, equals - colon - 1),
                        &group.world_size)) {
    return bad("the world size is not a number");
  }
  group.members =
      absl::StrSplit(flag.substr(equals + 1), ',', absl::SkipWhitespace());
  FG_RETURN_IF_ERROR(ValidateGroup(group, "--group"));
  return group;
}

}  // namespace fedgather::server
