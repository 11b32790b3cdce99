// EventLog (server/observe/event_log.h): each line is stamped with the
// injected clock's time, in JSON and in text.
#include "server/observe/event_log.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "absl/time/time.h"
#include "common/clock.h"

namespace fedgather::server {
namespace {

// 2026-12-03T09:00:00.123Z
const absl::Time kT0 = absl::FromUnixMillis(int64_t{1796288400} * 1000 + 123);

ServerEvent Completed() {
  ServerEvent event;
  event.kind = EventKind::kRoundCompleted;
  event.group = "demo";
  event.epoch = 1;
  event.seq = 0;
  return event;
}

TEST(EventLogTest, JsonLinesCarryTheClocksTime) {
  FakeClock clock(kT0);
  std::ostringstream out;
  EventLog log(&out, LogFormat::kJson, LogLevel::kDebug, &clock);
  log.OnEvent(Completed());
  clock.Advance(absl::Milliseconds(1500));
  log.Log(LogLevel::kInfo, "listening");
  EXPECT_EQ(out.str(),
            "{\"epoch\":1,\"event\":\"round_completed\",\"group\":\"demo\","
            "\"level\":\"info\",\"seq\":0,"
            "\"time\":\"2026-12-03T09:00:00.123Z\"}\n"
            "{\"level\":\"info\",\"message\":\"listening\","
            "\"time\":\"2026-12-03T09:00:01.623Z\"}\n");
}

TEST(EventLogTest, TextLinesCarryTheClocksTime) {
  FakeClock clock(kT0);
  std::ostringstream out;
  EventLog log(&out, LogFormat::kText, LogLevel::kDebug, &clock);
  log.OnEvent(Completed());
  log.Log(LogLevel::kWarning, "hello");
  EXPECT_EQ(out.str(),
            "2026-12-03T09:00:00.123Z info round_completed group=demo "
            "epoch=1 seq=0\n"
            "2026-12-03T09:00:00.123Z warning hello\n");
}

}  // namespace
}  // namespace fedgather::server
