// RefusalThrottle (server/observe/refusal_throttle.h): refusal records are
// bounded per field, repeats of one caller become one counted record per
// window, a byte budget caps the rest, and honest events always pass untouched.
// The last test measures the audit bytes a refusal flood writes through it.
#include "server/observe/refusal_throttle.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "server/observe/audit_event_sink.h"
#include "server/observe/audit_log.h"
#include "tests/server/events/recording_events.h"

namespace fedgather::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Pair;

const absl::Time kT0 = absl::FromUnixSeconds(1796222727);

class RefusalThrottleTest : public ::testing::Test {
 protected:
  RefusalThrottleOptions Options() {
    RefusalThrottleOptions options;
    options.clock = &clock_;
    return options;
  }

  // A refused certificate from `peer`, claiming `identity`.
  static ServerEvent Denied(const std::string& identity,
                            const std::string& peer = "ipv4:10.0.0.9:40000") {
    ServerEvent event;
    event.kind = EventKind::kAccessDenied;
    event.action = "authenticate";
    event.identity = identity;
    event.peer = peer;
    event.details = {{"rpc", "Session"}, {"identity_verified", "false"}};
    event.status = absl::UnauthenticatedError(
        absl::StrCat("the certificate of '", identity, "' is revoked"));
    return event;
  }

  static std::string Detail(const ServerEvent& event, const std::string& key) {
    for (const auto& [k, v] : event.details) {
      if (k == key) return v;
    }
    return "<none>";
  }

  FakeClock clock_{kT0};
  testing::RecordingEvents sink_;
};

TEST(BoundFieldTest, CutsLongTextVisiblyAndNeverInsideACharacter) {
  EXPECT_EQ(BoundField("short", 256), "short");
  EXPECT_EQ(BoundField(std::string(300, 'a'), 256),
            std::string(256, 'a') + "\xE2\x80\xA6(+44 bytes)");
  // "é" is two bytes: a cut at 3 would split the second one.
  EXPECT_EQ(BoundField("a\xC3\xA9\xC3\xA9", 4),
            "a\xC3\xA9\xE2\x80\xA6(+2 bytes)");
}

TEST_F(RefusalThrottleTest, RefusalFieldsAreBoundedAndHonestEventsAreNot) {
  RefusalThrottle throttle(Options(), &sink_);
  const std::string huge(30000, 'x');
  throttle.OnEvent(Denied(huge, "ipv4:10.0.0.9:" + huge));
  ServerEvent aborted;
  aborted.kind = EventKind::kRoundFailed;
  aborted.identity = huge;
  aborted.status = absl::DeadlineExceededError(huge);
  throttle.OnEvent(aborted);

  ASSERT_EQ(sink_.events().size(), 2u);
  const ServerEvent denied = sink_.events()[0];
  EXPECT_EQ(denied.identity,
            std::string(256, 'x') + "\xE2\x80\xA6(+29744 bytes)");
  EXPECT_LE(denied.peer.size(), 256u + 20);
  EXPECT_LE(denied.status.message().size(), 256u + 20);
  EXPECT_EQ(denied.status.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(sink_.events()[1].identity, huge);
  EXPECT_EQ(sink_.events()[1].status.message(), huge);
}

TEST_F(RefusalThrottleTest, RepeatsOfOneCallerBecomeOneCountedRecord) {
  RefusalThrottle throttle(Options(), &sink_);
  // 200 calls on new connections (new ports) from one host.
  for (int i = 0; i < 200; ++i) {
    throttle.OnEvent(Denied("spiffe://fed/mallory",
                            absl::StrCat("ipv4:10.0.0.9:", 40000 + i)));
    clock_.Advance(absl::Milliseconds(9));
  }
  ASSERT_EQ(sink_.events().size(), 1u);
  EXPECT_EQ(Detail(sink_.events()[0], "repeats"), "<none>");

  throttle.CloseWindows(kT0 + absl::Seconds(9));  // the window is open
  ASSERT_EQ(sink_.events().size(), 1u);
  throttle.CloseWindows(kT0 + absl::Seconds(10));
  ASSERT_EQ(sink_.events().size(), 2u);
  const ServerEvent summary = sink_.events()[1];
  EXPECT_EQ(summary.kind, EventKind::kAccessDenied);
  EXPECT_EQ(summary.identity, "spiffe://fed/mallory");
  EXPECT_EQ(Detail(summary, "repeats"), "199");
  EXPECT_EQ(Detail(summary, "window_start"), "2026-12-02T14:45:27.000000Z");
  EXPECT_EQ(Detail(summary, "window_end"), "2026-12-02T14:45:37.000000Z");

  // Another caller, or another refusal, has its own key.
  throttle.OnEvent(Denied("spiffe://fed/mallory", "ipv4:10.0.0.10:1"));
  throttle.OnEvent(Denied("spiffe://fed/eve"));
  EXPECT_EQ(sink_.events().size(), 4u);
}

// A server that stops within a window loses no count: Shutdown flushes.
TEST_F(RefusalThrottleTest, FlushPassesTheOpenWindowsAtOnce) {
  RefusalThrottle throttle(Options(), &sink_);
  for (int i = 0; i < 5; ++i) throttle.OnEvent(Denied("spiffe://fed/mallory"));
  clock_.Advance(absl::Seconds(2));
  throttle.Flush();
  ASSERT_EQ(sink_.events().size(), 2u);
  EXPECT_EQ(Detail(sink_.events()[1], "repeats"), "4");
  EXPECT_EQ(Detail(sink_.events()[1], "window_end"),
            "2026-12-02T14:45:29.000000Z");
  throttle.Flush();  // nothing is left open
  EXPECT_EQ(sink_.events().size(), 2u);
}

TEST_F(RefusalThrottleTest, TheBudgetCountsWhatItCannotPayAndReportsItOnce) {
  RefusalThrottleOptions options = Options();
  options.bytes_per_second = 1000;
  options.burst_bytes = 2000;
  RefusalThrottle throttle(options, &sink_);
  // Every call claims another identity: each is a new key.
  for (int i = 0; i < 100; ++i) {
    throttle.OnEvent(Denied(absl::StrCat("spiffe://fed/forged-", i)));
  }
  ServerEvent formed;
  formed.kind = EventKind::kGroupFormed;
  for (int i = 0; i < 100; ++i) throttle.OnEvent(formed);

  int denied = 0, honest = 0;
  for (const ServerEvent& event : sink_.events()) {
    (event.kind == EventKind::kGroupFormed ? honest : denied) += 1;
  }
  EXPECT_EQ(honest, 100);  // never throttled
  EXPECT_GE(denied, 2);    // the burst pays for a few (about 500 bytes each)
  EXPECT_LE(denied, 4);

  sink_.Clear();
  throttle.CloseWindows(kT0 + absl::Seconds(10));
  ASSERT_EQ(sink_.events().size(), 1u);
  const ServerEvent report = sink_.events()[0];
  EXPECT_EQ(report.action, "refusals_suppressed");
  EXPECT_EQ(Detail(report, "suppressed"), absl::StrCat(100 - denied));
  EXPECT_THAT(std::string(report.status.message()),
              HasSubstr("over the refusal record budget of 1000 bytes/s"));
  // Once reported, it is not reported again.
  throttle.CloseWindows(kT0 + absl::Seconds(30));
  EXPECT_EQ(sink_.events().size(), 1u);
}

// The review's flood: 200 refused calls on one connection by a certificate
// whose SAN URI is 30 KB. Unthrottled, each became a record of over 60 KB
// (the identity, and the reason naming it).
TEST_F(RefusalThrottleTest, AFloodOfRefusalsWritesAFewKilobytesOfAudit) {
  const std::string dir = ::testing::TempDir() + "/refusal_flood";
  std::filesystem::remove_all(dir);
  AuditLogOptions audit;
  audit.path = dir + "/audit.jsonl";
  auto log = AuditLog::Open(audit).value();
  AuditEventSink audit_sink(log.get(), nullptr);
  RefusalThrottle throttle(Options(), &audit_sink);
  const std::string claimed = "spiffe://fed/" + std::string(30000, 'm');
  for (int i = 0; i < 200; ++i) {
    throttle.OnEvent(Denied(claimed, "ipv4:127.0.0.1:40112"));
    clock_.Advance(absl::Milliseconds(9));
  }
  throttle.CloseWindows(kT0 + absl::Seconds(10));
  ASSERT_TRUE(log->Close().ok());
  struct stat st;
  ASSERT_EQ(::stat(audit.path.c_str(), &st), 0);
  EXPECT_EQ(log->records_written(), 2u);
  EXPECT_LT(st.st_size, 4096) << "audit bytes for 200 refusals";
  std::cout << "audit bytes for 200 refusals of a 30 KB identity: "
            << st.st_size << std::endl;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fedgather::server
