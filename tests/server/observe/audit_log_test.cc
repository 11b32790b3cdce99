// The audit log writer (server/observe/audit_log.h) and the chain verifier
// (common/audit_chain.h): concurrent appends form one chain, reopening and
// rotation continue it, anchors verify only with the server's certificate,
// and every kind of tampering is caught and names the right record. The
// `fedgather audit verify` CLI is run as a process for its exit codes.
#include "server/observe/audit_log.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/audit_chain.h"
#include "common/cert_issuer.h"
#include "common/clock.h"
#include "common/file_io.h"
#include "tests/common/subprocess.h"
#include "tests/server/observe/failing_audit_disk.h"

extern char** environ;

namespace fedgather::server {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Json = nlohmann::ordered_json;

const std::vector<std::string> kKeys = {
    "seq",     "time",    "identity", "peer",
    "action",  "group",   "epoch",    "collective_seq",
    "rank",    "op",      "bytes",    "digest_algorithm",
    "digest",  "digests", "outcome",  "reason",
    "details", "prev"};
const std::vector<std::string> kAnchorKeys = {
    "seq",     "time",    "identity", "peer",
    "action",  "group",   "epoch",    "collective_seq",
    "rank",    "op",      "bytes",    "digest_algorithm",
    "digest",  "digests", "outcome",  "reason",
    "details", "sig",     "prev"};

// An identity with non-ASCII text, a quote, a backslash and a newline, to
// check that escaping round-trips.
const char kOddIdentity[] = "spiffe://fed/s\xC3\xAFte-\"1\"\\\n\xE2\x9C\x93";

// A fresh directory under the test temp dir, removed with its contents.
class ScopedDir {
 public:
  ScopedDir() : path_(::testing::TempDir() + "/audit_test.XXXXXX") {
    EXPECT_NE(::mkdtemp(path_.data()), nullptr);
  }
  ~ScopedDir() { std::filesystem::remove_all(path_); }
  ScopedDir(const ScopedDir&) = delete;
  ScopedDir& operator=(const ScopedDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct Keys {
  KeyAndCert server;
  KeyAndCert other;  // from another CA
};

const Keys& TestKeys() {
  static const Keys* keys = [] {
    auto* k = new Keys;
    const KeyAndCert ca =
        CreateCertificateAuthority("audit-ca", absl::Hours(24)).value();
    CertificateSpec spec;
    spec.common_name = "fedgather-server";
    spec.dns_names = {"localhost"};
    spec.server_auth = true;
    k->server = IssueCertificate(ca, spec).value();
    const KeyAndCert other_ca =
        CreateCertificateAuthority("other-ca", absl::Hours(24)).value();
    k->other = IssueCertificate(other_ca, spec).value();
    return k;
  }();
  return *keys;
}

std::vector<std::string> ReadLines(const std::string& path) {
  const std::string contents = ReadFileToString(path).value();
  std::vector<std::string> lines = absl::StrSplit(contents, '\n');
  EXPECT_TRUE(lines.empty() || lines.back().empty())
      << path << " does not end with a newline";
  if (!lines.empty()) lines.pop_back();
  return lines;
}

void WriteLines(const std::string& path,
                const std::vector<std::string>& lines) {
  std::string contents;
  for (const std::string& line : lines) absl::StrAppend(&contents, line, "\n");
  ASSERT_TRUE(WriteStringToFile(path, contents, 0600).ok());
}

std::vector<std::string> KeysOf(const Json& json) {
  std::vector<std::string> keys;
  for (const auto& item : json.items()) keys.push_back(item.key());
  return keys;
}

AuditRecord Contribution(int thread, int index) {
  AuditRecord record;
  record.action = "contribution";
  record.identity = kOddIdentity;
  record.group = "demo";
  record.rank = thread;
  record.epoch = 3;
  record.collective_seq = static_cast<uint64_t>(index);
  record.details = {{"thread", std::to_string(thread)},
                    {"index", std::to_string(index)}};
  return record;
}

// A clock that moves one millisecond per call; called on the writer thread.
// SteppingClock moves 1 ms at every reading, so records' times differ.
class SteppingClock : public FakeClock {
 public:
  SteppingClock() : FakeClock(absl::FromUnixSeconds(1796222727)) {}
  absl::Time Now() override {
    const absl::Time now = FakeClock::Now();
    Advance(absl::Milliseconds(1));
    return now;
  }
};

AuditLogOptions Options(const std::string& path, bool sign = false) {
  AuditLogOptions options;
  options.path = path;
  // Each Options gets its own clock, kept to the end of the process: a log
  // may outlive its options. (A deque never moves its elements.)
  static std::deque<SteppingClock>* const clocks =
      new std::deque<SteppingClock>();
  options.clock = &clocks->emplace_back();
  if (sign) options.signing_key_pem = TestKeys().server.key_pem;
  return options;
}

AuditVerifyOptions WithCert(const std::string& cert_pem) {
  AuditVerifyOptions options;
  options.server_cert_pem = cert_pem;
  return options;
}

std::vector<Json> Records(const std::string& path) {
  std::vector<Json> records;
  for (const std::string& line : ReadLines(path)) {
    records.push_back(Json::parse(line));
  }
  return records;
}

std::string Details(const Json& record, const std::string& key) {
  return record["details"][key].get<std::string>();
}

// Runs the built `fedgather` CLI; returns its exit code and fills `out` and
// `err` with its stdout and stderr.
int RunCli(std::vector<std::string> args, std::string* out, std::string* err) {
  args.insert(args.begin(), FEDGATHER_CLI_PATH);
  return fedgather::testing::RunProcess(std::move(args), out, err);
}

TEST(AuditChainTest, AnchorSignaturesVerifyOnlyForTheSignedHead) {
  const std::string prev = AuditLineHash("a line");
  const std::string sig =
      SignAnchor(TestKeys().server.key_pem, 7, prev).value();
  EXPECT_TRUE(VerifyAnchor(TestKeys().server.cert_pem, 7, prev, sig).ok());
  EXPECT_TRUE(
      absl::IsDataLoss(VerifyAnchor(TestKeys().server.cert_pem, 8, prev, sig)));
  EXPECT_TRUE(absl::IsDataLoss(VerifyAnchor(TestKeys().server.cert_pem, 7,
                                            AuditLineHash("b line"), sig)));
  EXPECT_TRUE(
      absl::IsDataLoss(VerifyAnchor(TestKeys().other.cert_pem, 7, prev, sig)));
  EXPECT_TRUE(absl::IsDataLoss(
      VerifyAnchor(TestKeys().server.cert_pem, 7, prev, "not base64!")));
  EXPECT_TRUE(
      absl::IsInvalidArgument(SignAnchor("not a key", 7, prev).status()));
  EXPECT_EQ(AuditAnchorMessage(7, prev),
            absl::StrCat("fedgather-audit-anchor-v1 seq=7 prev=", prev));
  EXPECT_EQ(FormatAuditTime(absl::FromUnixMicros(1796222727123456)),
            "2026-12-02T14:45:27.123456Z");
}

TEST(AuditLogTest, ConcurrentAppendsFormOneVerifiableChain) {
  const ScopedDir dir;
  const std::string path = dir.path() + "/audit.jsonl";
  auto log = AuditLog::Open(Options(path)).value();
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&log, t] {
      for (int i = 0; i < kPerThread; ++i) log->Append(Contribution(t, i));
    });
  }
  for (std::thread& thread : threads) thread.join();
  ASSERT_TRUE(log->Flush().ok());
  EXPECT_EQ(log->records_written(), kThreads * kPerThread);

  const auto report = VerifyAuditFiles({path}, {});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->records, kThreads * kPerThread);
  EXPECT_EQ(report->first_seq, 0u);
  EXPECT_EQ(report->last_seq, kThreads * kPerThread - 1u);
  EXPECT_EQ(report->anchors, 0u);
  EXPECT_FALSE(report->signed_to_end);

  const std::vector<std::string> lines = ReadLines(path);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kPerThread));
  std::vector<int> next_index(kThreads, 0);
  for (size_t i = 0; i < lines.size(); ++i) {
    const Json json = Json::parse(lines[i]);
    EXPECT_EQ(KeysOf(json), kKeys) << lines[i];
    EXPECT_EQ(json["seq"].get<uint64_t>(), i);
    EXPECT_EQ(
        json["prev"].get<std::string>(),
        i == 0 ? std::string(kAuditGenesisPrev) : AuditLineHash(lines[i - 1]));
    EXPECT_EQ(json["identity"].get<std::string>(), kOddIdentity);
    EXPECT_EQ(json["time"].get<std::string>().size(),
              std::string("2026-12-02T14:45:27.123456Z").size());
    EXPECT_TRUE(json["peer"].is_null());
    EXPECT_TRUE(json["digests"].is_null());
    EXPECT_EQ(json["outcome"], "OK");
    // Each thread's records appear in its Append order.
    const int thread = std::stoi(json["details"]["thread"].get<std::string>());
    const int index = std::stoi(json["details"]["index"].get<std::string>());
    EXPECT_EQ(index, next_index[thread]++);
    EXPECT_EQ(json["rank"].get<int>(), thread);
  }
  EXPECT_TRUE(log->Close().ok());
  EXPECT_TRUE(log->Close().ok());  // idempotent
  log->Append(Contribution(0, 99));
  EXPECT_EQ(log->records_dropped(), 1u);
  EXPECT_TRUE(log->Flush().ok());
}

TEST(AuditLogTest, WritesEveryFieldAndNullForUnset) {
  const ScopedDir dir;
  const std::string path = dir.path() + "/audit.jsonl";
  auto log = AuditLog::Open(Options(path)).value();
  AuditRecord full;
  full.action = "commit";
  full.identity = "site-1";
  full.peer = "ipv4:127.0.0.1:5555";
  full.group = "demo";
  full.op = "all_gather";
  full.digest_algorithm = "blake3";
  full.digest_hex = std::string(64, 'a');
  full.reason = "round complete";
  full.epoch = 2;
  full.collective_seq = 9;
  full.rank = 1;
  full.bytes = 4096;
  full.digests = {{0, "site-0", std::string(64, 'b'), 10},
                  {1, "site-1", std::string(64, 'c'), 20}};
  full.outcome = "OK";
  full.details = {{"dtype", "float32"}};
  log->Append(full);
  AuditRecord bare;
  bare.action = "denied";
  bare.outcome = "PERMISSION_DENIED";
  log->Append(bare);
  AuditRecord posing;
  posing.action = "anchor";  // reserved for the log itself
  log->Append(posing);
  ASSERT_TRUE(log->Close().ok());

  const std::vector<std::string> lines = ReadLines(path);
  ASSERT_EQ(lines.size(), 3u);
  const Json first = Json::parse(lines[0]);
  EXPECT_EQ(KeysOf(first), kKeys);
  EXPECT_EQ(first["identity"], "site-1");
  EXPECT_EQ(first["peer"], "ipv4:127.0.0.1:5555");
  EXPECT_EQ(first["action"], "commit");
  EXPECT_EQ(first["group"], "demo");
  EXPECT_EQ(first["epoch"], 2);
  EXPECT_EQ(first["collective_seq"], 9);
  EXPECT_EQ(first["rank"], 1);
  EXPECT_EQ(first["op"], "all_gather");
  EXPECT_EQ(first["bytes"], 4096);
  EXPECT_EQ(first["digest_algorithm"], "blake3");
  EXPECT_EQ(first["digest"], std::string(64, 'a'));
  EXPECT_EQ(first["digests"].size(), 2u);
  EXPECT_EQ(first["digests"][1]["identity"], "site-1");
  EXPECT_EQ(first["digests"][1]["digest"], std::string(64, 'c'));
  EXPECT_EQ(first["digests"][1]["bytes"], 20);
  EXPECT_EQ(first["digests"][0]["rank"], 0);
  EXPECT_EQ(first["reason"], "round complete");
  EXPECT_EQ(first["details"]["dtype"], "float32");
  EXPECT_EQ(first["time"], "2026-12-02T14:45:27.000000Z");

  const Json second = Json::parse(lines[1]);
  EXPECT_EQ(KeysOf(second), kKeys);
  for (const char* key :
       {"identity", "peer", "group", "epoch", "collective_seq", "rank", "op",
        "bytes", "digest_algorithm", "digest", "digests", "reason",
        "details"}) {
    EXPECT_TRUE(second[key].is_null()) << key;
  }
  EXPECT_EQ(second["outcome"], "PERMISSION_DENIED");
  EXPECT_EQ(Json::parse(lines[2])["action"], "reserved:anchor");
  EXPECT_TRUE(VerifyAuditFiles({path}, {}).ok());
}

TEST(AuditLogTest, ReopenContinuesTheChain) {
  const ScopedDir dir;
  const std::string path = dir.path() + "/audit.jsonl";
  for (int round = 0; round < 3; ++round) {
    auto log = AuditLog::Open(Options(path, /*sign=*/true)).value();
    for (int i = 0; i < 4; ++i) log->Append(Contribution(round, i));
    ASSERT_TRUE(log->Close().ok());
  }
  // Each session: 4 records and a final anchor.
  const std::vector<std::string> lines = ReadLines(path);
  ASSERT_EQ(lines.size(), 15u);
  for (size_t i = 1; i < lines.size(); ++i) {
    const Json json = Json::parse(lines[i]);
    EXPECT_EQ(json["seq"].get<uint64_t>(), i);
    EXPECT_EQ(json["prev"].get<std::string>(), AuditLineHash(lines[i - 1]));
  }
  EXPECT_EQ(KeysOf(Json::parse(lines[4])), kAnchorKeys);
  EXPECT_EQ(Json::parse(lines[4])["details"]["head_seq"], 3);
  const auto report =
      VerifyAuditFiles({path}, WithCert(TestKeys().server.cert_pem));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->records, 15u);
  EXPECT_EQ(report->anchors, 3u);
  EXPECT_TRUE(report->signed_to_end);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
}

TEST(AuditLogTest, OpenCreatesAMissingDirectory) {
  const ScopedDir dir;
  const std::string path = dir.path() + "/var/log/fedgather/audit.jsonl";
  auto log = AuditLog::Open(Options(path));
  ASSERT_TRUE(log.ok()) << log.status();
  (*log)->Append(Contribution(0, 0));
  ASSERT_TRUE((*log)->Close().ok());
  EXPECT_EQ(ReadLines(path).size(), 1u);  // unsigned: no anchor
  struct stat st;
  ASSERT_EQ(::stat((dir.path() + "/var/log/fedgather").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700);
  // A path whose parent cannot be a directory names it.
  ASSERT_TRUE(WriteStringToFile(dir.path() + "/file", "x").ok());
  auto refused = AuditLog::Open(Options(dir.path() + "/file/audit.jsonl"));
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(dir.path() + "/file"),
            std::string::npos)
      << refused.status();
}

TEST(AuditLogTest, OpenRefusesAFileWhoseLastWholeLineIsNotARecord) {
  const ScopedDir dir;
  const std::string path = dir.path() + "/audit.jsonl";
  {
    auto log = AuditLog::Open(Options(path)).value();
    log->Append(Contribution(0, 0));
    ASSERT_TRUE(log->Close().ok());
  }
  std::string contents = ReadFileToString(path).value();
  ASSERT_TRUE(WriteStringToFile(path, contents + "not json\n", 0600).ok());
  const auto garbage = AuditLog::Open(Options(path));
  ASSERT_TRUE(absl::IsFailedPrecondition(garbage.status())) << garbage.status();
  EXPECT_THAT(std::string(garbage.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(garbage.status().message()),
              HasSubstr("fedgather audit verify"));
}

// A crash cut the last line of a signed log: the server sets the file aside,
// starts the next one with a record of the cut, and the whole history,
// cut bytes included, verifies with the server's certificate.
TEST(AuditLogTest, OpenSetsACutOffFileAsideAndRecordsTheCut) {
  const ScopedDir dir;
  const std::string path = dir.path() + "/audit.jsonl";
  const std::string cert = dir.path() + "/server.pem";
  ASSERT_TRUE(WriteStringToFile(cert, TestKeys().server.cert_pem).ok());
  const AuditLogOptions options = Options(path, /*sign=*/true);
  {
    auto log = AuditLog::Open(options).value();
    for (int i = 0; i < 3; ++i) log->Append(Contribution(0, i));
    ASSERT_TRUE(log->Close().ok());
  }
  const std::vector<std::string> intact = ReadLines(path);
  const uint64_t last_seq = Json::parse(intact.back())["seq"];
  const std::string cut = "{\"seq\":4,\"ti";
  const std::string damaged = ReadFileToString(path).value() + cut;
  ASSERT_TRUE(WriteStringToFile(path, damaged, 0600).ok());

  auto log = AuditLog::Open(options);
  ASSERT_TRUE(log.ok()) << log.status();
  (*log)->Append(Contribution(1, 0));
  ASSERT_TRUE((*log)->Close().ok());

  // The damaged file is kept, byte for byte, as the first rotated file.
  const std::string aside = path + ".000001";
  EXPECT_EQ(ReadFileToString(aside).value(), damaged);
  const std::vector<Json> records = Records(path);
  ASSERT_GE(records.size(), 2u);
  const Json& record = records.front();
  EXPECT_EQ(record["action"], "audit_tail_cut");
  EXPECT_EQ(record["seq"], last_seq + 1);
  EXPECT_EQ(record["prev"], AuditLineHash(intact.back()));
  EXPECT_EQ(record["outcome"], "DATA_LOSS");
  EXPECT_EQ(Details(record, "file"), "audit.jsonl.000001");
  EXPECT_EQ(Details(record, "cut_bytes"), absl::StrCat(cut.size()));
  EXPECT_EQ(Details(record, "after_seq"), absl::StrCat(last_seq));
  EXPECT_EQ(records[1]["action"], "contribution");

  const auto report =
      VerifyAuditFiles({aside, path}, WithCert(TestKeys().server.cert_pem));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->signed_to_end);
  ASSERT_EQ(report->cut_tails.size(), 1u);
  EXPECT_THAT(report->cut_tails[0],
              HasSubstr(absl::StrCat(cut.size(), " bytes cut off after record ",
                                     last_seq)));
  std::string out, err;
  EXPECT_EQ(
      RunCli({"audit", "verify", aside, path, "--cert", cert}, &out, &err), 0)
      << err;
  EXPECT_THAT(out, HasSubstr("cut-off tail, recorded by the server at its "
                             "next start: "));
  // Without the record of the cut, a cut-off line is still caught.
  const auto alone = VerifyAuditFiles({aside}, {});
  EXPECT_TRUE(absl::IsDataLoss(alone.status())) << alone.status();
}

TEST(AuditLogTest, OpenRefusesACutOffFileDamagedBeforeItsLastLine) {
  const ScopedDir dir;
  const std::string path = dir.path() + "/audit.jsonl";
  {
    auto log = AuditLog::Open(Options(path)).value();
    for (int i = 0; i < 3; ++i) log->Append(Contribution(0, i));
    ASSERT_TRUE(log->Close().ok());
  }
  std::vector<std::string> lines = ReadLines(path);
  lines[1].replace(lines[1].find("demo"), 4, "dema");
  WriteLines(path, lines);
  const std::string damaged = ReadFileToString(path).value() + "{\"seq\":3";
  ASSERT_TRUE(WriteStringToFile(path, damaged, 0600).ok());

  const auto refused = AuditLog::Open(Options(path));
  ASSERT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("record 1"));
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("fedgather audit verify"));
  // Nothing was moved or written.
  EXPECT_EQ(ReadFileToString(path).value(), damaged);
  EXPECT_NE(::access((path + ".000001").c_str(), F_OK), 0);
}

TEST(AuditLogTest, RotationKeepsOneChainAcrossFiles) {
  const ScopedDir scoped;
  const std::string& dir = scoped.path();
  const std::string path = dir + "/audit.jsonl";
  AuditLogOptions options = Options(path, /*sign=*/true);
  options.rotate_bytes = 2000;
  auto log = AuditLog::Open(options).value();
  for (int i = 0; i < 60; ++i) log->Append(Contribution(0, i));
  ASSERT_TRUE(log->Close().ok());

  // The rotated files oldest first, then the active one.
  auto list_files = [&] {
    std::vector<std::string> listed;
    for (int n = 1;; ++n) {
      const std::string rotated = absl::StrFormat("%s.%06d", path, n);
      if (::access(rotated.c_str(), F_OK) != 0) break;
      listed.push_back(rotated);
      // Each closed file ends with a signed anchor.
      const std::vector<std::string> lines = ReadLines(rotated);
      EXPECT_FALSE(lines.empty()) << rotated;
      if (!lines.empty()) {
        EXPECT_EQ(Json::parse(lines.back())["action"], "anchor") << rotated;
      }
    }
    listed.push_back(path);
    return listed;
  };
  const std::vector<std::string> files = list_files();
  ASSERT_GE(files.size(), 4u);

  const auto cert = WithCert(TestKeys().server.cert_pem);
  const auto report = VerifyAuditFiles(files, cert);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->records - report->anchors, 60u);
  EXPECT_TRUE(report->signed_to_end);

  // Leaving a file out of the middle breaks the chain where it was.
  std::vector<std::string> gap = files;
  const uint64_t first_of_second =
      Json::parse(ReadLines(files[1]).front())["seq"].get<uint64_t>();
  gap.erase(gap.begin() + 1);
  const auto missing = VerifyAuditFiles(gap, cert);
  ASSERT_TRUE(absl::IsDataLoss(missing.status())) << missing.status();
  // A whole file of records is missing, named from its first seq.
  EXPECT_THAT(std::string(missing.status().message()),
              StartsWith(absl::StrCat("records ", first_of_second, "..")));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("missing"));
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("rotated file"));

  // Without the older files the chain is accepted and reported as partial.
  const std::vector<std::string> newest(files.begin() + 1, files.end());
  const auto partial = VerifyAuditFiles(newest, cert);
  ASSERT_TRUE(partial.ok()) << partial.status();
  EXPECT_EQ(partial->first_seq, first_of_second);

  // A new session continues after the newest rotated file (and may rotate
  // the active file once more).
  auto reopened = AuditLog::Open(options).value();
  reopened->Append(Contribution(1, 0));
  ASSERT_TRUE(reopened->Close().ok());
  const auto again = VerifyAuditFiles(list_files(), cert);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->records, report->records + 2);
}

AuditLogOptions FailingOptions(const std::string& path,
                               FailingAuditDisk* disk) {
  AuditLogOptions options = Options(path);
  options.file = disk->Calls();
  options.retry_period = absl::Milliseconds(5);
  return options;
}

TEST(AuditFailureTest, AFailedWriteFailsClosedKeepsItsRecordsAndRecovers) {
  const ScopedDir dir;
  const std::string path = dir.path() + "/audit.jsonl";
  FailingAuditDisk disk;
  auto log = AuditLog::Open(FailingOptions(path, &disk)).value();
  log->Append(Contribution(0, 0));
  ASSERT_TRUE(log->Flush().ok());

  // The disk fills up in the middle of a line.
  disk.partial_bytes = 10;
  disk.write_errno = ENOSPC;
  log->Append(Contribution(0, 1));
  log->Append(Contribution(0, 2));
  const absl::Status failed = log->Flush();
  ASSERT_TRUE(absl::IsResourceExhausted(failed)) << failed;
  EXPECT_THAT(std::string(failed.message()),
              HasSubstr(absl::StrCat("write audit file ", path)));
  EXPECT_EQ(log->status(), failed);
  EXPECT_EQ(log->write_failures(), 1u);
  // Retries keep failing and keep the records; nothing is dropped.
  EXPECT_FALSE(log->WaitUntilWritten(absl::Milliseconds(50)));
  EXPECT_FALSE(log->status().ok());
  EXPECT_EQ(log->records_dropped(), 0u);

  disk.write_errno = 0;
  ASSERT_TRUE(log->WaitUntilWritten(absl::Seconds(20)));
  EXPECT_TRUE(log->status().ok()) << log->status();
  EXPECT_EQ(log->write_failures(), 1u);
  ASSERT_TRUE(log->Close().ok());

  // The partly written line was cut off; the kept records follow, then the
  // record of the gap.
  const std::vector<Json> records = Records(path);
  ASSERT_EQ(records.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(records[i]["action"], "contribution");
    EXPECT_EQ(records[i]["collective_seq"], i);
  }
  const Json& gap = records[3];
  EXPECT_EQ(gap["action"], "audit_gap");
  EXPECT_EQ(gap["outcome"], "RESOURCE_EXHAUSTED");
  EXPECT_THAT(gap["reason"].get<std::string>(), HasSubstr("write audit file"));
  EXPECT_EQ(Details(gap, "dropped"), "0");
  EXPECT_LE(Details(gap, "unwritable_from"), Details(gap, "unwritable_until"));
  EXPECT_LE(records[2]["time"].get<std::string>(), gap["time"]);
  EXPECT_TRUE(VerifyAuditFiles({path}, {}).ok());
}

TEST(AuditFailureTest, RecordsBeyondTheQueueBoundAreDroppedAndReported) {
  const ScopedDir dir;
  const std::string path = dir.path() + "/audit.jsonl";
  FailingAuditDisk disk;
  AuditLogOptions options = FailingOptions(path, &disk);
  options.max_queued_records = 2;
  auto log = AuditLog::Open(options).value();
  disk.write_errno = EIO;
  log->Append(Contribution(0, 0));  // the writer holds it, failing
  ASSERT_FALSE(log->Flush().ok());
  for (int i = 1; i <= 5; ++i) log->Append(Contribution(0, i));
  // Two wait in the queue; three are dropped.
  EXPECT_EQ(log->records_dropped(), 3u);

  disk.write_errno = 0;
  ASSERT_TRUE(log->WaitUntilWritten(absl::Seconds(20)));
  ASSERT_TRUE(log->Close().ok());
  const std::vector<Json> records = Records(path);
  ASSERT_EQ(records.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(records[i]["collective_seq"], i);
  const Json& gap = records[3];
  EXPECT_EQ(gap["action"], "audit_gap");
  EXPECT_EQ(Details(gap, "dropped"), "3");
  EXPECT_LT(Details(gap, "first_dropped"), Details(gap, "last_dropped"));
  EXPECT_LE(Details(gap, "unwritable_from"), Details(gap, "first_dropped"));
  EXPECT_TRUE(VerifyAuditFiles({path}, {}).ok());
}

TEST(AuditFailureTest, AFailedFsyncFailsClosedUntilAnFsyncSucceeds) {
  const ScopedDir dir;
  const std::string path = dir.path() + "/audit.jsonl";
  FailingAuditDisk disk;
  auto log = AuditLog::Open(FailingOptions(path, &disk)).value();
  disk.fsync_errno = EIO;
  log->Append(Contribution(0, 0));
  const absl::Status failed = log->Flush();
  EXPECT_FALSE(failed.ok());
  EXPECT_THAT(std::string(failed.message()),
              HasSubstr(absl::StrCat("fsync audit file ", path)));
  disk.fsync_errno = 0;
  ASSERT_TRUE(log->WaitUntilWritten(absl::Seconds(20)));
  EXPECT_TRUE(log->status().ok());
  ASSERT_TRUE(log->Close().ok());
  const std::vector<Json> records = Records(path);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[1]["action"], "audit_gap");
  EXPECT_THAT(records[1]["reason"].get<std::string>(), HasSubstr("fsync"));
}

TEST(AuditFailureTest, CloseWhileFailingReturnsTheErrorAndCountsTheLoss) {
  const ScopedDir dir;
  const std::string path = dir.path() + "/audit.jsonl";
  FailingAuditDisk disk;
  auto log = AuditLog::Open(FailingOptions(path, &disk)).value();
  disk.write_errno = ENOSPC;
  log->Append(Contribution(0, 0));
  log->Append(Contribution(0, 1));
  EXPECT_FALSE(log->Flush().ok());
  const absl::Status closed = log->Close();
  EXPECT_TRUE(absl::IsResourceExhausted(closed)) << closed;
  EXPECT_EQ(log->records_dropped(), 2u);
  EXPECT_EQ(log->records_written(), 0u);
}

class AuditFsyncTest : public ::testing::TestWithParam<AuditFsync> {};

TEST_P(AuditFsyncTest, EveryModeWritesAVerifiableChain) {
  const ScopedDir dir;
  const std::string path = dir.path() + "/audit.jsonl";
  AuditLogOptions options = Options(path, /*sign=*/true);
  options.fsync = GetParam();
  options.anchor_every = 7;
  auto log = AuditLog::Open(options).value();
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&log, t] {
      for (int i = 0; i < 20; ++i) log->Append(Contribution(t, i));
    });
  }
  for (std::thread& thread : threads) thread.join();
  ASSERT_TRUE(log->Flush().ok());
  EXPECT_EQ(log->records_written(), 40u);
  AuditVerifyOptions allow_tail = WithCert(TestKeys().server.cert_pem);
  allow_tail.allow_unsigned_tail = true;
  const auto flushed = VerifyAuditFiles({path}, allow_tail);
  ASSERT_TRUE(flushed.ok()) << flushed.status();
  EXPECT_EQ(flushed->records, 45u);  // 40 records, an anchor after each 7
  ASSERT_TRUE(log->Close().ok());
  const auto closed =
      VerifyAuditFiles({path}, WithCert(TestKeys().server.cert_pem));
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_EQ(closed->records, 46u);
  EXPECT_EQ(closed->anchors, 6u);
  EXPECT_TRUE(closed->signed_to_end);
}

INSTANTIATE_TEST_SUITE_P(Modes, AuditFsyncTest,
                         ::testing::Values(AuditFsync::kEveryRecord,
                                           AuditFsync::kGroupCommit,
                                           AuditFsync::kOff));

TEST(AuditLogTest, AnchorsVerifyWithTheServerCertAndFailWithAnother) {
  const ScopedDir dir;
  const std::string path = dir.path() + "/audit.jsonl";
  AuditLogOptions options = Options(path, /*sign=*/true);
  options.anchor_every = 5;
  auto log = AuditLog::Open(options).value();
  for (int i = 0; i < 23; ++i) log->Append(Contribution(0, i));
  ASSERT_TRUE(log->Close().ok());
  EXPECT_EQ(log->anchors_written(), 5u);

  const auto report =
      VerifyAuditFiles({path}, WithCert(TestKeys().server.cert_pem));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->records, 28u);
  EXPECT_EQ(report->anchors, 5u);
  EXPECT_TRUE(report->signed_to_end);

  const auto other =
      VerifyAuditFiles({path}, WithCert(TestKeys().other.cert_pem));
  ASSERT_TRUE(absl::IsDataLoss(other.status())) << other.status();
  // The first anchor follows records 0..4.
  EXPECT_THAT(std::string(other.status().message()), StartsWith("record 5 ("));
  EXPECT_THAT(std::string(other.status().message()), HasSubstr("signature"));

  const auto unchecked = VerifyAuditFiles({path}, {});
  ASSERT_TRUE(unchecked.ok()) << unchecked.status();
  EXPECT_FALSE(unchecked->signed_to_end);
}

// Tampering with a signed log of 20 records and an anchor after every 5:
// seq 0..4 records, 5 anchor, 6..10, 11 anchor, 12..16, 17 anchor, 18..22,
// 23 anchor.
class AuditTamperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.path() + "/audit.jsonl";
    AuditLogOptions options = Options(path_, /*sign=*/true);
    options.anchor_every = 5;
    auto log = AuditLog::Open(options).value();
    for (int i = 0; i < 20; ++i) log->Append(Contribution(i % 3, i));
    ASSERT_TRUE(log->Close().ok());
    lines_ = ReadLines(path_);
    ASSERT_EQ(lines_.size(), 24u);
    ASSERT_TRUE(VerifyAuditFiles({path_}, Cert()).ok());
  }

  static AuditVerifyOptions Cert() {
    return WithCert(TestKeys().server.cert_pem);
  }

  // Verifies with the certificate and returns the DATA_LOSS message.
  std::string Failure(const AuditVerifyOptions& options = Cert()) {
    const auto report = VerifyAuditFiles({path_}, options);
    EXPECT_TRUE(absl::IsDataLoss(report.status())) << report.status();
    return std::string(report.status().message());
  }

  ScopedDir dir_;
  std::string path_;
  std::vector<std::string> lines_;
};

TEST_F(AuditTamperTest, OneEditedByteNamesTheRecord) {
  const size_t at = lines_[8].find("contribution");
  ASSERT_NE(at, std::string::npos);
  lines_[8][at + 11] = 'm';  // "contributiom"
  WriteLines(path_, lines_);
  const std::string message = Failure();
  EXPECT_THAT(message, StartsWith("record 8 ("));
  EXPECT_THAT(message, HasSubstr("audit.jsonl:9"));
  EXPECT_THAT(message, HasSubstr("was altered"));
  EXPECT_THAT(message, HasSubstr("record 9"));
  // The hash chain alone catches it.
  EXPECT_THAT(Failure({}), StartsWith("record 8 ("));
}

TEST_F(AuditTamperTest, EditThatBreaksJsonNamesTheRecord) {
  lines_[8][0] = '[';
  WriteLines(path_, lines_);
  const std::string message = Failure();
  EXPECT_THAT(message, StartsWith("record 8 ("));
  EXPECT_THAT(message, HasSubstr("does not parse"));
}

TEST_F(AuditTamperTest, EditedSeqNamesTheRecord) {
  const size_t at = lines_[8].find("\"seq\":8,");
  ASSERT_NE(at, std::string::npos);
  lines_[8][at + 6] = '7';
  WriteLines(path_, lines_);
  EXPECT_THAT(Failure(), StartsWith("record 8 ("));
}

TEST_F(AuditTamperTest, EditedPrevNamesTheRecord) {
  const size_t at = lines_[8].find("\"prev\":\"");
  ASSERT_NE(at, std::string::npos);
  char& c = lines_[8][at + 8];
  c = c == '0' ? '1' : '0';
  WriteLines(path_, lines_);
  const std::string message = Failure();
  EXPECT_THAT(message, StartsWith("record 8 ("));
  EXPECT_THAT(message, HasSubstr("prev"));
}

TEST_F(AuditTamperTest, EditedSignatureNamesTheAnchor) {
  const size_t at = lines_[11].find("\"sig\":\"");
  ASSERT_NE(at, std::string::npos);
  char& c = lines_[11][at + 12];
  c = c == 'A' ? 'B' : 'A';
  WriteLines(path_, lines_);
  const std::string with_cert = Failure();
  EXPECT_THAT(with_cert, StartsWith("record 11 ("));
  EXPECT_THAT(with_cert, HasSubstr("signature"));
  EXPECT_THAT(Failure({}), StartsWith("record 11 ("));
}

TEST_F(AuditTamperTest, DeletedLineNamesTheMissingRecord) {
  lines_.erase(lines_.begin() + 8);
  WriteLines(path_, lines_);
  const std::string message = Failure();
  EXPECT_THAT(message, StartsWith("record 8 is missing"));
  EXPECT_THAT(message, HasSubstr("deleted"));
}

TEST_F(AuditTamperTest, SwappedLinesNameTheFirstOutOfPlace) {
  std::swap(lines_[8], lines_[9]);
  WriteLines(path_, lines_);
  const std::string message = Failure();
  EXPECT_THAT(message, StartsWith("record 8 ("));
  EXPECT_THAT(message, HasSubstr("out of order"));
}

TEST_F(AuditTamperTest, InsertedCopyNamesItsPosition) {
  lines_.insert(lines_.begin() + 8, lines_[3]);
  WriteLines(path_, lines_);
  EXPECT_THAT(Failure(), StartsWith("record 8 ("));
}

TEST_F(AuditTamperTest, InsertedForgedRecordIsCaught) {
  // A forged record 8 that chains correctly onto record 7; the real record 8
  // then repeats its seq.
  Json forged = Json::parse(lines_[8]);
  forged["identity"] = "mallory";
  forged["prev"] = AuditLineHash(lines_[7]);
  lines_.insert(lines_.begin() + 8, forged.dump());
  WriteLines(path_, lines_);
  const std::string message = Failure();
  EXPECT_THAT(message, StartsWith("record 8 ("));
  EXPECT_THAT(message, HasSubstr("duplicated"));
}

TEST_F(AuditTamperTest, TruncationMidRecordNamesTheLastRecord) {
  std::string contents = ReadFileToString(path_).value();
  contents.resize(contents.size() - 20);
  ASSERT_TRUE(WriteStringToFile(path_, contents, 0600).ok());
  const std::string message = Failure();
  EXPECT_THAT(message, StartsWith("record 23 ("));
  EXPECT_THAT(message, HasSubstr("truncated"));
  EXPECT_THAT(Failure({}), StartsWith("record 23 ("));
}

TEST_F(AuditTamperTest, NonZeroGenesisPrevIsCaught) {
  Json first = Json::parse(lines_[0]);
  first["prev"] = std::string(63, '0') + "1";
  lines_[0] = first.dump();
  WriteLines(path_, lines_);
  const std::string message = Failure({});
  EXPECT_THAT(message, StartsWith("record 0 ("));
  EXPECT_THAT(message, HasSubstr("64 zeros"));
}

TEST_F(AuditTamperTest, RewrittenUnsignedTailIsCaughtWithTheCert) {
  // Keep records 0..12 and forge 13..19 with a valid hash chain.
  lines_.resize(13);
  for (uint64_t seq = 13; seq < 20; ++seq) {
    Json forged = Json::parse(lines_[12]);
    forged["seq"] = seq;
    forged["identity"] = "mallory";
    forged["prev"] = AuditLineHash(lines_.back());
    lines_.push_back(forged.dump());
  }
  WriteLines(path_, lines_);
  const auto chain_only = VerifyAuditFiles({path_}, {});
  ASSERT_TRUE(chain_only.ok()) << chain_only.status();
  EXPECT_EQ(chain_only->last_seq, 19u);
  const std::string message = Failure();
  EXPECT_THAT(message,
              StartsWith("records 12..19 after the last signed anchor are not "
                         "covered by a signature"));
}

TEST_F(AuditTamperTest, TruncationAtALineBoundaryIsCaughtWithTheCert) {
  lines_.resize(21);  // drops records 21, 22 and the final anchor 23
  WriteLines(path_, lines_);
  EXPECT_TRUE(VerifyAuditFiles({path_}, {}).ok());
  EXPECT_THAT(Failure(), StartsWith("records 18..20 after the last signed"));
  AuditVerifyOptions allow = Cert();
  allow.allow_unsigned_tail = true;
  const auto allowed = VerifyAuditFiles({path_}, allow);
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_FALSE(allowed->signed_to_end);
  EXPECT_EQ(allowed->anchors, 3u);
}

TEST_F(AuditTamperTest, ChainWithoutAnyAnchorNamesItsWholeRange) {
  lines_.resize(5);  // records 0..4, before the first anchor
  WriteLines(path_, lines_);
  EXPECT_THAT(Failure(), StartsWith("records 0..4 "));
}

TEST(AuditVerifyTest, FileProblemsAreNotDataLoss) {
  const ScopedDir scoped;
  const std::string& dir = scoped.path();
  EXPECT_TRUE(
      absl::IsNotFound(VerifyAuditFiles({dir + "/absent.jsonl"}, {}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(VerifyAuditFiles({dir}, {}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(VerifyAuditFiles({}, {}).status()));
  ASSERT_TRUE(WriteStringToFile(dir + "/empty.jsonl", "", 0600).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(
      VerifyAuditFiles({dir + "/empty.jsonl"}, {}).status()));
}

TEST(AuditCliTest, VerifyExitCodes) {
  const ScopedDir scoped;
  const std::string& dir = scoped.path();
  const std::string path = dir + "/audit.jsonl";
  const std::string cert = dir + "/server.pem";
  ASSERT_TRUE(WriteStringToFile(cert, TestKeys().server.cert_pem).ok());
  AuditLogOptions options = Options(path, /*sign=*/true);
  options.anchor_every = 4;
  auto log = AuditLog::Open(options).value();
  for (int i = 0; i < 10; ++i) log->Append(Contribution(0, i));
  ASSERT_TRUE(log->Close().ok());

  std::string out, err;
  EXPECT_EQ(RunCli({"audit", "verify", path, "--cert", cert}, &out, &err), 0)
      << err;
  EXPECT_THAT(out, HasSubstr("audit chain intact: 13 records (seq 0..12), "
                             "3 signed anchors, signed to the end"));

  std::vector<std::string> lines = ReadLines(path);
  lines[6].replace(lines[6].find("demo"), 4, "dema");
  WriteLines(path, lines);
  EXPECT_EQ(RunCli({"audit", "verify", path, "--cert", cert}, &out, &err), 1);
  EXPECT_THAT(err, StartsWith("fedgather audit verify: DATA_LOSS: record 6 ("));

  EXPECT_EQ(RunCli({"audit", "verify"}, &out, &err), 2);
  EXPECT_EQ(RunCli({"audit"}, &out, &err), 2);
}

// A log of the SHA-256 era, before digests named their algorithm (key
// "sha256", every digest a SHA-256): written by fedgather-server at c369e5a
// under bench/allgather_bench (3 ranks over TLS, all_gather and all_reduce,
// an anchor every 20 records), with that server's certificate.
std::string Sha256EraLog() {
  return std::string(FEDGATHER_AUDIT_TESTDATA) + "/sha256_era_audit.jsonl";
}
std::string Sha256EraCert() {
  return std::string(FEDGATHER_AUDIT_TESTDATA) + "/sha256_era_server_cert.pem";
}

TEST(AuditChainTest, ALogOfTheSha256EraStillVerifiesSignedToTheEnd) {
  const std::string cert = ReadFileToString(Sha256EraCert()).value();
  const auto report = VerifyAuditFiles({Sha256EraLog()}, WithCert(cert));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->records, 59u);
  EXPECT_TRUE(report->signed_to_end);
  std::string out, err;
  EXPECT_EQ(
      RunCli({"audit", "verify", Sha256EraLog(), "--cert", Sha256EraCert()},
             &out, &err),
      0)
      << err;
  EXPECT_THAT(out, HasSubstr("audit chain intact: 59 records"));

  // A digest changed in it is caught (by the next record's prev).
  const ScopedDir dir;
  const std::string path = dir.path() + "/audit.jsonl";
  std::vector<std::string> lines = ReadLines(Sha256EraLog());
  size_t changed = 0;
  while (changed < lines.size() &&
         Json::parse(lines[changed])["action"] != "contribution") {
    ++changed;
  }
  ASSERT_LT(changed, lines.size());
  const size_t key = lines[changed].find("\"sha256\":\"");
  ASSERT_NE(key, std::string::npos) << lines[changed];  // a digest, not null
  const size_t at = key + 10;
  lines[changed][at] = lines[changed][at] == '0' ? '1' : '0';
  WriteLines(path, lines);
  const auto tampered = VerifyAuditFiles({path}, WithCert(cert));
  EXPECT_TRUE(absl::IsDataLoss(tampered.status())) << tampered.status();
}

TEST(AuditLogTest, ANewServerContinuesALogOfTheSha256Era) {
  const ScopedDir dir;
  const std::string path = dir.path() + "/audit.jsonl";
  ASSERT_TRUE(
      WriteStringToFile(path, ReadFileToString(Sha256EraLog()).value(), 0600)
          .ok());
  auto log = AuditLog::Open(Options(path)).value();  // another key: unsigned
  AuditRecord commit;
  commit.action = "commit";
  commit.group = "demo";
  commit.digest_algorithm = "blake3";
  commit.digests = {{0, "site-0", std::string(64, 'e'), 10}};
  commit.outcome = "OK";
  log->Append(commit);
  ASSERT_TRUE(log->Close().ok());

  const auto report = VerifyAuditFiles({path}, {});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->records, 60u);
  const std::vector<std::string> lines = ReadLines(path);
  EXPECT_TRUE(Json::parse(lines[0]).contains("sha256"));
  const Json last = Json::parse(lines.back());
  EXPECT_EQ(KeysOf(last), kKeys);
  EXPECT_EQ(last["digest_algorithm"], "blake3");
  EXPECT_EQ(last["digests"][0]["digest"], std::string(64, 'e'));
}

// The last record of a log, changed (nothing after it checks its hash):
// the schema alone must catch what is wrong.
TEST(AuditChainTest, ADigestWithoutAKnownAlgorithmIsRefused) {
  const ScopedDir dir;
  const std::string path = dir.path() + "/audit.jsonl";
  auto log = AuditLog::Open(Options(path)).value();
  AuditRecord contribution;
  contribution.action = "contribution";
  contribution.digest_algorithm = "blake3";
  contribution.digest_hex = std::string(64, 'a');
  contribution.outcome = "OK";
  log->Append(contribution);
  ASSERT_TRUE(log->Close().ok());
  ASSERT_TRUE(VerifyAuditFiles({path}, {}).ok());
  const std::string written = ReadLines(path).back();
  for (const auto& [from, to, why] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"\"digest_algorithm\":\"blake3\"", "\"digest_algorithm\":\"md5\"",
            "its digest_algorithm is not null, \"sha256\" or \"blake3\""},
           {"\"digest_algorithm\":\"blake3\"", "\"digest_algorithm\":null",
            "it has digests but no digest_algorithm naming their hash"},
           {"\"digest_algorithm\":\"blake3\"",
            "\"sha256\":null,\"digest_algorithm\":\"blake3\"",
            "it has both the old \"sha256\" key and the \"digest\" keys"},
           {"\"digest_algorithm\":\"blake3\",", "",
            "it has no \"digest_algorithm\" key"}}) {
    std::string line = written;
    line.replace(line.find(from), from.size(), to);
    WriteLines(path, {line});
    const auto refused = VerifyAuditFiles({path}, {});
    EXPECT_TRUE(absl::IsDataLoss(refused.status())) << refused.status();
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr(why));
  }
}

}  // namespace
}  // namespace fedgather::server
