#include "server/observe/refusal_throttle.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/audit_chain.h"

namespace fedgather::server {
namespace {

// A record's bytes beyond its strings: keys, seq, time, prev, nulls.
constexpr int64_t kRecordOverheadBytes = 400;

bool IsRefusal(const ServerEvent& event) {
  return event.kind == EventKind::kAccessDenied ||
         event.kind == EventKind::kLimitExceeded;
}

// PeerHost is a gRPC peer ("ipv4:127.0.0.1:40112") without its port, so
// that new connections from one host share a key.
std::string PeerHost(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

ServerEvent Bounded(const ServerEvent& event, size_t max_bytes) {
  ServerEvent bounded = event;
  for (std::string* field :
       {&bounded.action, &bounded.group, &bounded.identity, &bounded.peer}) {
    *field = BoundField(*field, max_bytes);
  }
  for (auto& [key, value] : bounded.details) {
    value = BoundField(value, max_bytes);
  }
  if (!event.status.ok()) {
    bounded.status = absl::Status(
        event.status.code(),
        BoundField(std::string(event.status.message()), max_bytes));
  }
  return bounded;
}

int64_t CostOf(const ServerEvent& event) {
  int64_t bytes = kRecordOverheadBytes + event.action.size() +
                  event.group.size() + event.identity.size() +
                  event.peer.size() + event.status.message().size();
  for (const auto& [key, value] : event.details) {
    bytes += key.size() + value.size();
  }
  return bytes;
}

}  // namespace

std::string BoundField(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t cut = max_bytes;
  // Back off over UTF-8 continuation bytes (10xxxxxx).
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  return absl::StrCat(text.substr(0, cut), "\xE2\x80\xA6(+", text.size() - cut,
                      " bytes)");
}

RefusalThrottle::RefusalThrottle(RefusalThrottleOptions options,
                                 EventSink* next)
    : options_(std::move(options)),
      next_(next),
      tokens_(static_cast<double>(options_.burst_bytes)),
      refilled_(options_.clock->Now()) {}

void RefusalThrottle::OnEvent(const ServerEvent& event) {
  if (!IsRefusal(event)) {
    if (next_ != nullptr) next_->OnEvent(event);
    return;
  }
  std::vector<ServerEvent> out;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = options_.clock->Now();
    CloseWindowsLocked(now, /*all=*/false, &out);
    ServerEvent bounded = Bounded(event, options_.max_field_bytes);
    Key key{static_cast<int>(bounded.kind),
            bounded.action,
            bounded.group,
            bounded.identity,
            PeerHost(bounded.peer),
            bounded.status.ToString()};
    if (auto it = windows_.find(key); it != windows_.end()) {
      ++it->second.repeats;
    } else if (windows_.size() >= options_.max_keys) {
      SuppressLocked(now);
    } else if (PayLocked(bounded, now)) {
      windows_.emplace(std::move(key), Window{bounded, now, 0});
      out.push_back(std::move(bounded));
    }
  }
  PassOn(out);
}

void RefusalThrottle::CloseWindows(absl::Time now) {
  std::vector<ServerEvent> out;
  {
    absl::MutexLock lock(&mu_);
    CloseWindowsLocked(now, /*all=*/false, &out);
  }
  PassOn(out);
}

void RefusalThrottle::Flush() {
  std::vector<ServerEvent> out;
  {
    absl::MutexLock lock(&mu_);
    CloseWindowsLocked(options_.clock->Now(), /*all=*/true, &out);
  }
  PassOn(out);
}

void RefusalThrottle::CloseWindowsLocked(absl::Time now, bool all,
                                         std::vector<ServerEvent>* out) {
  for (auto it = windows_.begin(); it != windows_.end();) {
    Window& window = it->second;
    if (!all && now < window.start + options_.window) {
      ++it;
      continue;
    }
    if (window.repeats > 0) {
      ServerEvent summary = std::move(window.first);
      summary.details.emplace_back("repeats", absl::StrCat(window.repeats));
      summary.details.emplace_back("window_start",
                                   FormatAuditTime(window.start));
      summary.details.emplace_back("window_end", FormatAuditTime(now));
      if (PayLocked(summary, now)) {
        out->push_back(std::move(summary));
      } else {
        suppressed_ += window.repeats - 1;  // SuppressLocked counted one
        last_suppressed_ = now;
      }
    }
    it = windows_.erase(it);
  }
  if (suppressed_ > 0 && (all || now >= first_suppressed_ + options_.window)) {
    ServerEvent report;
    report.kind = EventKind::kAccessDenied;
    report.action = "refusals_suppressed";
    report.status = absl::ResourceExhaustedError(absl::StrCat(
        suppressed_,
        " refusals were not recorded one by one: over the refusal record "
        "budget of ",
        options_.bytes_per_second, " bytes/s, or beyond ", options_.max_keys,
        " distinct callers refused within ",
        absl::FormatDuration(options_.window)));
    report.details = {{"suppressed", absl::StrCat(suppressed_)},
                      {"first", FormatAuditTime(first_suppressed_)},
                      {"last", FormatAuditTime(last_suppressed_)}};
    out->push_back(std::move(report));
    suppressed_ = 0;
  }
}

bool RefusalThrottle::PayLocked(const ServerEvent& event, absl::Time now) {
  const double elapsed = absl::ToDoubleSeconds(now - refilled_);
  refilled_ = std::max(refilled_, now);
  tokens_ =
      std::min(static_cast<double>(options_.burst_bytes),
               tokens_ + std::max(0.0, elapsed) *
                             static_cast<double>(options_.bytes_per_second));
  const double cost = static_cast<double>(CostOf(event));
  if (tokens_ < cost) {
    SuppressLocked(now);
    return false;
  }
  tokens_ -= cost;
  return true;
}

void RefusalThrottle::SuppressLocked(absl::Time now) {
  if (suppressed_++ == 0) first_suppressed_ = now;
  last_suppressed_ = now;
}

void RefusalThrottle::PassOn(const std::vector<ServerEvent>& events) {
  if (next_ == nullptr) return;
  for (const ServerEvent& event : events) next_->OnEvent(event);
}

}  // namespace fedgather::server
