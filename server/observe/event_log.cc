#include "server/observe/event_log.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace fedgather::server {
namespace {

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

std::string FormatLineTime(absl::Time now) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", now, absl::UTCTimeZone());
}

std::string JsonLine(const ServerEvent& event, LogLevel level, absl::Time now) {
  nlohmann::json line = {{"time", FormatLineTime(now)},
                         {"level", LevelName(level)},
                         {"event", EventKindName(event.kind)}};
  if (!event.action.empty()) line["action"] = event.action;
  if (!event.group.empty()) line["group"] = event.group;
  if (event.epoch > 0) line["epoch"] = event.epoch;
  if (event.seq.has_value()) line["seq"] = *event.seq;
  if (event.rank >= 0) line["rank"] = event.rank;
  if (!event.identity.empty()) line["identity"] = event.identity;
  if (!event.peer.empty()) line["peer"] = event.peer;
  if (event.bytes > 0) line["bytes"] = event.bytes;
  if (!event.digest_algorithm.empty()) {
    line["digest_algorithm"] = event.digest_algorithm;
  }
  if (!event.digest_hex.empty()) line["digest"] = event.digest_hex;
  for (const auto& [key, value] : event.details) line["details"][key] = value;
  if (!event.status.ok()) {
    line["code"] = absl::StatusCodeToString(event.status.code());
    line["message"] = std::string(event.status.message());
  }
  // Names and messages may hold any bytes: replace what is not UTF-8.
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string TextLine(const ServerEvent& event, LogLevel level, absl::Time now) {
  std::string line = absl::StrCat(FormatLineTime(now), " ", LevelName(level),
                                  " ", EventKindName(event.kind));
  if (!event.action.empty()) absl::StrAppend(&line, " action=", event.action);
  if (!event.group.empty()) absl::StrAppend(&line, " group=", event.group);
  if (event.epoch > 0) absl::StrAppend(&line, " epoch=", event.epoch);
  if (event.seq.has_value()) absl::StrAppend(&line, " seq=", *event.seq);
  if (event.rank >= 0) absl::StrAppend(&line, " rank=", event.rank);
  if (!event.identity.empty()) {
    absl::StrAppend(&line, " identity=", event.identity);
  }
  if (!event.peer.empty()) absl::StrAppend(&line, " peer=", event.peer);
  if (event.bytes > 0) absl::StrAppend(&line, " bytes=", event.bytes);
  for (const auto& [key, value] : event.details) {
    absl::StrAppend(&line, " ", key, "=", value);
  }
  if (!event.status.ok()) {
    absl::StrAppend(&line, " status=", event.status.ToString());
  }
  return line;
}

}  // namespace

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view text) {
  if (text == "json") return LogFormat::kJson;
  if (text == "text") return LogFormat::kText;
  return absl::InvalidArgumentError(
      absl::StrCat("--log-format '", text, "': expected json or text"));
}

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view text) {
  for (LogLevel level : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning,
                         LogLevel::kError}) {
    if (text == LevelName(level)) return level;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--log-level '", text, "': expected debug, info, warning or error"));
}

LogLevel LevelOf(const ServerEvent& event) {
  switch (event.kind) {
    case EventKind::kEquivocation:
    case EventKind::kAuditUnwritable:
      return LogLevel::kError;
    case EventKind::kGroupRestored:
      return event.status.ok() ? LogLevel::kInfo : LogLevel::kError;
    case EventKind::kAccessDenied:
    case EventKind::kConnectionsRefused:
    case EventKind::kLimitExceeded:
    case EventKind::kJoinRefused:
    case EventKind::kCollectiveRefused:
    case EventKind::kRoundFailed:
    case EventKind::kRoundsAborted:
      return LogLevel::kWarning;
    case EventKind::kPolicyReloaded:
    case EventKind::kMemberLeft:
    case EventKind::kGroupDissolved:
      return event.status.ok() ? LogLevel::kInfo : LogLevel::kWarning;
    case EventKind::kStatusRead:
      return LogLevel::kDebug;
    default:
      return LogLevel::kInfo;
  }
}

EventLog::EventLog(std::ostream* out, LogFormat format, LogLevel min_level,
                   Clock* clock)
    : out_(out), format_(format), min_level_(min_level), clock_(clock) {}

void EventLog::OnEvent(const ServerEvent& event) {
  const LogLevel level = LevelOf(event);
  if (level < min_level_) return;
  Write(format_ == LogFormat::kJson ? JsonLine(event, level, clock_->Now())
                                    : TextLine(event, level, clock_->Now()));
}

void EventLog::Log(LogLevel level, absl::string_view message) {
  if (level < min_level_) return;
  if (format_ == LogFormat::kJson) {
    nlohmann::json line = {{"time", FormatLineTime(clock_->Now())},
                           {"level", LevelName(level)},
                           {"message", std::string(message)}};
    Write(line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    Write(absl::StrCat(FormatLineTime(clock_->Now()), " ", LevelName(level),
                       " ", message));
  }
}

void EventLog::Write(const std::string& line) {
  absl::MutexLock lock(&mu_);
  *out_ << line << std::endl;
}

}  // namespace fedgather::server
