// EventLog: the server's log. Every ServerEvent becomes one line on a
// stream (stderr in fedgather-server), as a JSON object (the default) or as
// human-readable text, with a level; lines below the minimum level are
// dropped. The binary's own messages ("listening on port ...") go through
// Log. Events carry no tensor bytes and no key material, so neither can the
// log (tests/e2e/operability_e2e_test.cc greps it for both).
//
// JSON:  {"time":"2026-12-03T09:00:00.123Z","level":"info",
//         "event":"round_completed","group":"demo","epoch":1,"seq":0,...}
// text:  2026-12-03T09:00:00.123Z info round_completed group=demo epoch=1 ...
//
// Thread safety: OnEvent and Log may be called from any thread; lines are
// never interleaved.
#ifndef FEDGATHER_SERVER_OBSERVE_EVENT_LOG_H_
#define FEDGATHER_SERVER_OBSERVE_EVENT_LOG_H_

#include <ostream>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "server/events/event_sink.h"

namespace fedgather::server {

enum class LogFormat { kJson, kText };
enum class LogLevel { kDebug, kInfo, kWarning, kError };

// Parse "json"/"text" and "debug"/"info"/"warning"/"error";
// INVALID_ARGUMENT naming the flag and the choices otherwise.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view text);
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view text);

// LevelOf is an event's level: error for equivocation, a failed restore
// and an audit log that cannot be written; warning for refusals, limit hits,
// failed rounds and abnormal ends; debug for status reads; info otherwise.
LogLevel LevelOf(const ServerEvent& event);

class EventLog : public EventSink {
 public:
  // `out` and `clock` (which stamps each line) must outlive the log.
  EventLog(std::ostream* out, LogFormat format, LogLevel min_level,
           Clock* clock = SystemClock());

  void OnEvent(const ServerEvent& event) override;
  // Log writes a message of the binary's own at `level`.
  void Log(LogLevel level, absl::string_view message);

 private:
  void Write(const std::string& line);

  std::ostream* const out_ ABSL_PT_GUARDED_BY(mu_);  // lines never interleave
  const LogFormat format_;
  const LogLevel min_level_;
  Clock* const clock_;
  absl::Mutex mu_;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_OBSERVE_EVENT_LOG_H_
