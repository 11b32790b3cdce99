#include "server/access/access_policy.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/content_hasher.h"
#include "common/file_io.h"
#include "common/ip_network.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace fedgather::server {
namespace {

// Where a problem is, for error messages: "policy.yaml: group 'demo'".
struct Where {
  std::string text;
  Where In(absl::string_view more) const {
    return Where{absl::StrCat(text, ": ", more)};
  }
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(text, ": ", what));
  }
};

absl::StatusOr<std::string> Scalar(const YAML::Node& node, const Where& where) {
  if (!node.IsScalar()) return where.Error("expected a single value");
  return node.Scalar();
}

absl::Status CheckIdentity(absl::string_view identity, const Where& where) {
  if (identity.empty()) return where.Error("an identity is empty");
  for (char c : identity) {
    if (absl::ascii_iscntrl(static_cast<unsigned char>(c))) {
      return where.Error(absl::StrCat("identity '", absl::CEscape(identity),
                                      "' holds a control character"));
    }
  }
  return absl::OkStatus();
}

// ParseCount reads a positive integer of at most `max`.
absl::StatusOr<int64_t> ParseCount(const YAML::Node& node, int64_t max,
                                   const Where& where) {
  FG_ASSIGN_OR_RETURN(const std::string text, Scalar(node, where));
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 1 || value > max) {
    return where.Error(
        absl::StrCat("'", text, "' is not a whole number in 1..", max));
  }
  return value;
}

// ParseDurationValue reads a positive duration in Go syntax: "30s", "2m",
// "1h30m", "500ms".
absl::StatusOr<absl::Duration> ParseDurationValue(const YAML::Node& node,
                                                  const Where& where) {
  FG_ASSIGN_OR_RETURN(const std::string text, Scalar(node, where));
  absl::Duration duration;
  if (!absl::ParseDuration(text, &duration) ||
      duration <= absl::ZeroDuration() ||
      duration == absl::InfiniteDuration()) {
    return where.Error(absl::StrCat(
        "'", text, "' is not a positive duration (such as 30s, 2m, 1h30m)"));
  }
  return duration;
}

// ParseBytes reads a positive byte count: a number, optionally followed by
// KiB, MiB, GiB or TiB.
absl::StatusOr<int64_t> ParseBytes(const YAML::Node& node, const Where& where) {
  FG_ASSIGN_OR_RETURN(const std::string text, Scalar(node, where));
  static constexpr std::pair<absl::string_view, int> kUnits[] = {
      {"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}};
  absl::string_view digits = absl::StripAsciiWhitespace(text);
  int shift = 0;
  for (const auto& [suffix, bits] : kUnits) {
    if (absl::ConsumeSuffix(&digits, suffix)) {
      shift = bits;
      digits = absl::StripTrailingAsciiWhitespace(digits);
      break;
    }
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(digits, &value) || value < 1 ||
      value > (INT64_MAX >> shift)) {
    return where.Error(absl::StrCat(
        "'", text, "' is not a positive byte count (e.g. 1048576 or 8GiB)"));
  }
  return value << shift;
}

absl::StatusOr<Role> ParseRole(const YAML::Node& node, const Where& where) {
  FG_ASSIGN_OR_RETURN(const std::string text, Scalar(node, where));
  for (Role role : {Role::kParticipant, Role::kObserver, Role::kAdmin}) {
    if (text == RoleName(role)) return role;
  }
  return where.Error(absl::StrCat(
      "unknown role '", text, "' (expected participant, observer or admin)"));
}

absl::Status RequireMap(const YAML::Node& node, const Where& where) {
  if (!node.IsMap()) return where.Error("expected a mapping");
  return absl::OkStatus();
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kParticipant:
      return "participant";
    case Role::kObserver:
      return "observer";
    case Role::kAdmin:
      return "admin";
  }
  return "unknown";
}

const char* ActionName(Action action) {
  switch (action) {
    case Action::kJoin:
      return "join";
    case Action::kContribute:
      return "contribute";
    case Action::kReadStatus:
      return "read_status";
    case Action::kAbortRound:
      return "abort_round";
    case Action::kReloadPolicy:
      return "reload_policy";
  }
  return "unknown";
}

namespace {

absl::StatusOr<IdentityLimitOverrides> ParseLimits(const YAML::Node& node,
                                                   const Where& where) {
  FG_RETURN_IF_ERROR(RequireMap(node, where));
  IdentityLimitOverrides limits;
  for (const auto& item : node) {
    const std::string key = item.first.as<std::string>();
    const Where at = where.In(key);
    if (key == "max_contribution_bytes") {
      FG_ASSIGN_OR_RETURN(limits.max_contribution_bytes,
                          ParseBytes(item.second, at));
    } else if (key == "max_tensors_per_contribution") {
      FG_ASSIGN_OR_RETURN(const int64_t n,
                          ParseCount(item.second, 1 << 24, at));
      limits.max_tensors_per_contribution = static_cast<int>(n);
    } else if (key == "max_concurrent_streams") {
      FG_ASSIGN_OR_RETURN(const int64_t n,
                          ParseCount(item.second, 1 << 20, at));
      limits.max_concurrent_streams = static_cast<int>(n);
    } else if (key == "max_groups") {
      FG_ASSIGN_OR_RETURN(const int64_t n,
                          ParseCount(item.second, 1 << 20, at));
      limits.max_groups = static_cast<int>(n);
    } else if (key == "max_rounds_in_flight") {
      FG_ASSIGN_OR_RETURN(const int64_t n,
                          ParseCount(item.second, 1 << 20, at));
      limits.max_rounds_in_flight = static_cast<int>(n);
    } else {
      return where.Error(absl::StrCat(
          "unknown limit '", key,
          "' (expected max_contribution_bytes, max_tensors_per_contribution, "
          "max_concurrent_streams, max_groups or max_rounds_in_flight)"));
    }
  }
  return limits;
}

void ApplyOverrides(const IdentityLimitOverrides& o, IdentityLimits* limits) {
  limits->max_contribution_bytes =
      o.max_contribution_bytes.value_or(limits->max_contribution_bytes);
  limits->max_tensors_per_contribution =
      o.max_tensors_per_contribution.value_or(
          limits->max_tensors_per_contribution);
  limits->max_concurrent_streams =
      o.max_concurrent_streams.value_or(limits->max_concurrent_streams);
  limits->max_groups = o.max_groups.value_or(limits->max_groups);
  limits->max_rounds_in_flight =
      o.max_rounds_in_flight.value_or(limits->max_rounds_in_flight);
}

absl::StatusOr<GroupPolicy> ParseGroup(const YAML::Node& node,
                                       const Where& policy) {
  FG_RETURN_IF_ERROR(RequireMap(node, policy.In("groups")));
  GroupPolicy group;
  if (node["name"]) {
    FG_ASSIGN_OR_RETURN(group.name,
                        Scalar(node["name"], policy.In("group name")));
  }
  if (group.name.empty()) return policy.Error("a group has no name");
  const Where where = policy.In(absl::StrCat("group '", group.name, "'"));
  bool has_world_size = false;
  for (const auto& item : node) {
    const std::string key = item.first.as<std::string>();
    if (key == "name") continue;
    if (key == "world_size") {
      FG_ASSIGN_OR_RETURN(
          const int64_t n,
          ParseCount(item.second, kMaxWorldSize, where.In("world_size")));
      group.world_size = static_cast<int>(n);
      has_world_size = true;
    } else if (key == "min_quorum") {
      FG_ASSIGN_OR_RETURN(
          const int64_t n,
          ParseCount(item.second, kMaxWorldSize, where.In("min_quorum")));
      group.min_quorum = static_cast<int>(n);
    } else if (key == "round_deadline") {
      FG_ASSIGN_OR_RETURN(
          group.round_deadline,
          ParseDurationValue(item.second, where.In("round_deadline")));
    } else if (key == "max_rounds_in_flight") {
      FG_ASSIGN_OR_RETURN(
          const int64_t n,
          ParseCount(item.second, 1 << 10, where.In("max_rounds_in_flight")));
      group.max_rounds_in_flight = static_cast<int>(n);
    } else if (key == "digest") {
      FG_ASSIGN_OR_RETURN(const std::string name,
                          Scalar(item.second, where.In("digest")));
      const std::optional<DigestAlgorithm> digest = ParseDigestAlgorithm(name);
      if (!digest.has_value()) {
        return where.In("digest").Error(
            absl::StrCat("is '", name, "' (expected blake3 or sha256)"));
      }
      group.digest = *digest;
    } else if (key == "peer_networks") {
      const Where at = where.In("peer_networks");
      if (!item.second.IsSequence()) {
        return at.Error("expected a list of networks (CIDR, e.g. 10.0.0.0/8)");
      }
      for (const auto& entry : item.second) {
        FG_ASSIGN_OR_RETURN(const std::string text, Scalar(entry, at));
        absl::StatusOr<IpNetwork> network = IpNetwork::Parse(text);
        if (!network.ok()) return at.Error(network.status().message());
        group.peer_networks.push_back(*std::move(network));
      }
    } else if (key == "data_plane") {
      FG_ASSIGN_OR_RETURN(const std::string name,
                          Scalar(item.second, where.In("data_plane")));
      if (name == "auto") {
        group.data_plane = DataPlanePolicy::kAuto;
      } else if (name == "relay") {
        group.data_plane = DataPlanePolicy::kRelay;
      } else if (name == "direct") {
        group.data_plane = DataPlanePolicy::kDirect;
      } else {
        return where.In("data_plane")
            .Error(absl::StrCat("is '", name,
                                "' (expected auto, relay or direct)"));
      }
    } else if (key == "members") {
      FG_RETURN_IF_ERROR(RequireMap(
          item.second, where.In("members (identity: role, one per line)")));
      for (const auto& member : item.second) {
        const std::string identity = member.first.as<std::string>();
        FG_RETURN_IF_ERROR(CheckIdentity(identity, where));
        const Where at = where.In(absl::StrCat("member '", identity, "'"));
        FG_ASSIGN_OR_RETURN(const Role role, ParseRole(member.second, at));
        if (!group.members.emplace(identity, role).second) {
          return at.Error("is listed twice");
        }
      }
    } else {
      return where.Error(absl::StrCat(
          "unknown key '", key,
          "' (expected name, world_size, min_quorum, round_deadline, "
          "max_rounds_in_flight, digest, peer_networks, data_plane, members)"));
    }
  }
  if (!has_world_size) return where.Error("world_size is missing");
  const int participants = static_cast<int>(std::count_if(
      group.members.begin(), group.members.end(),
      [](const auto& m) { return m.second == Role::kParticipant; }));
  if (participants < group.world_size) {
    return where.Error(absl::StrCat("world_size is ", group.world_size,
                                    " but only ", participants,
                                    " members are participants"));
  }
  if (group.min_quorum > group.world_size) {
    return where.Error(absl::StrCat("min_quorum ", group.min_quorum,
                                    " is larger than world_size ",
                                    group.world_size));
  }
  if (group.data_plane == DataPlanePolicy::kDirect && group.min_quorum > 0 &&
      group.min_quorum < group.world_size) {
    return where.Error(
        absl::StrCat("data_plane is direct but min_quorum ", group.min_quorum,
                     " is below world_size ", group.world_size,
                     ": quorum rounds run on the relay (data_plane: auto or "
                     "relay)"));
  }
  return group;
}

}  // namespace

absl::StatusOr<AccessPolicy> AccessPolicy::Parse(absl::string_view yaml,
                                                 absl::string_view source) {
  const Where where{std::string(source)};
  AccessPolicy policy;
  Sha256 hasher;
  hasher.Update(yaml.data(), yaml.size());
  policy.sha256_ = DigestToHex(hasher.Finish());
  try {
    const YAML::Node root = YAML::Load(std::string(yaml));
    if (!root.IsMap()) {
      return where.Error(
          "a policy is a mapping with version, groups and optional "
          "server_admins, limits and identity_limits");
    }
    bool has_version = false;
    std::set<std::string> names;
    for (const auto& item : root) {
      const std::string key = item.first.as<std::string>();
      const Where at = where.In(key);
      if (key == "version") {
        FG_ASSIGN_OR_RETURN(const std::string version, Scalar(item.second, at));
        if (version != "1") {
          return at.Error(absl::StrCat("version ", version,
                                       " is not supported (expected 1)"));
        }
        has_version = true;
      } else if (key == "server_admins") {
        if (!item.second.IsSequence()) {
          return at.Error("expected a list of identities");
        }
        for (const auto& admin : item.second) {
          FG_ASSIGN_OR_RETURN(std::string identity, Scalar(admin, at));
          FG_RETURN_IF_ERROR(CheckIdentity(identity, at));
          policy.server_admins_.push_back(std::move(identity));
        }
      } else if (key == "limits") {
        FG_ASSIGN_OR_RETURN(const IdentityLimitOverrides limits,
                            ParseLimits(item.second, at));
        ApplyOverrides(limits, &policy.defaults_);
      } else if (key == "identity_limits") {
        FG_RETURN_IF_ERROR(RequireMap(item.second, at));
        for (const auto& entry : item.second) {
          const std::string identity = entry.first.as<std::string>();
          FG_RETURN_IF_ERROR(CheckIdentity(identity, at));
          const Where entry_at = at.In(absl::StrCat("'", identity, "'"));
          FG_ASSIGN_OR_RETURN(const IdentityLimitOverrides limits,
                              ParseLimits(entry.second, entry_at));
          if (!policy.identity_limits_.emplace(identity, limits).second) {
            return entry_at.Error("is listed twice");
          }
        }
      } else if (key == "groups") {
        if (!item.second.IsSequence()) return at.Error("expected a list");
        for (const auto& node : item.second) {
          FG_ASSIGN_OR_RETURN(GroupPolicy group, ParseGroup(node, where));
          if (!names.insert(group.name).second) {
            return where.Error(
                absl::StrCat("group '", group.name, "' is defined twice"));
          }
          policy.groups_.push_back(std::move(group));
        }
      } else {
        return where.Error(absl::StrCat(
            "unknown top-level key '", key,
            "' (expected version, server_admins, limits, identity_limits, "
            "groups)"));
      }
    }
    if (!has_version) return where.Error("'version: 1' is missing");
  } catch (const YAML::Exception& e) {
    return where.Error(e.what());
  }
  return policy;
}

absl::StatusOr<AccessPolicy> AccessPolicy::Load(const std::string& path) {
  FG_ASSIGN_OR_RETURN(const std::string yaml, ReadFileToString(path));
  return Parse(yaml, path);
}

std::vector<GroupConfig> AccessPolicy::GroupConfigs() const {
  std::vector<GroupConfig> configs;
  for (const GroupPolicy& group : groups_) {
    GroupConfig config;
    config.name = group.name;
    config.world_size = group.world_size;
    config.min_quorum = group.min_quorum;
    config.round_deadline = group.round_deadline;
    config.max_rounds_in_flight = group.max_rounds_in_flight;
    config.digest = group.digest;
    config.peer_networks = group.peer_networks;
    config.data_plane = group.data_plane;
    for (const auto& [identity, role] : group.members) {
      if (role == Role::kParticipant) config.members.push_back(identity);
    }
    configs.push_back(std::move(config));
  }
  return configs;
}

std::optional<Role> AccessPolicy::RoleOf(absl::string_view identity,
                                         absl::string_view group) const {
  for (const GroupPolicy& g : groups_) {
    if (g.name != group) continue;
    auto it = g.members.find(std::string(identity));
    if (it == g.members.end()) return std::nullopt;
    return it->second;
  }
  return std::nullopt;
}

absl::Status AccessPolicy::Authorize(absl::string_view identity,
                                     absl::string_view group,
                                     Action action) const {
  if (action == Action::kReloadPolicy) {
    if (std::find(server_admins_.begin(), server_admins_.end(), identity) !=
        server_admins_.end()) {
      return absl::OkStatus();
    }
    return absl::PermissionDeniedError(
        absl::StrCat("identity '", identity,
                     "' may not reload the policy (it is not a server admin)"));
  }
  const std::optional<Role> role = RoleOf(identity, group);
  if (!role.has_value()) return NotAMemberError(identity, group);
  bool allowed = false;
  switch (action) {
    case Action::kJoin:
    case Action::kContribute:
      allowed = *role == Role::kParticipant;
      break;
    case Action::kReadStatus:
      allowed = true;
      break;
    case Action::kAbortRound:
      allowed = *role == Role::kAdmin;
      break;
    case Action::kReloadPolicy:
      break;
  }
  if (allowed) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "identity '", identity, "' has role ", RoleName(*role), " in group '",
      group, "', which may not ", ActionName(action)));
}

std::vector<const GroupPolicy*> AccessPolicy::VisibleGroups(
    absl::string_view identity) const {
  std::vector<const GroupPolicy*> visible;
  for (const GroupPolicy& g : groups_) {
    if (g.members.count(std::string(identity)) > 0) visible.push_back(&g);
  }
  return visible;
}

IdentityLimits AccessPolicy::LimitsFor(absl::string_view identity) const {
  IdentityLimits limits = defaults_;
  auto it = identity_limits_.find(identity);
  if (it == identity_limits_.end()) return limits;
  ApplyOverrides(it->second, &limits);
  return limits;
}

}  // namespace fedgather::server
