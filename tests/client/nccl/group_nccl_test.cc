// ShareNcclUniqueId (client/nccl/nccl_unique_id.h) against a real server over
// mutual TLS, with the signed audit log on: every member gets rank 0's
// ncclUniqueId, the audit log holds its SHA-256 and never its bytes (raw, hex
// or in any record), and no server event (what the server's stderr log prints)
// carries them. ncclGetUniqueId needs no GPU, so this runs wherever
// fg_client_nccl builds.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "client/group.h"
#include "client/nccl/nccl_communicators.h"
#include "client/nccl/nccl_status.h"
#include "client/nccl/nccl_unique_id.h"
#include "common/content_hasher.h"
#include "common/file_io.h"
#include "tests/e2e/test_cluster.h"

namespace fedgather::testing {
namespace {

bool Mentions(const server::ServerEvent& e, const std::string& needle) {
  std::vector<std::string> fields = {e.action, e.identity, e.digest_hex,
                                     std::string(e.status.message())};
  for (const auto& [key, value] : e.details) {
    fields.push_back(key);
    fields.push_back(value);
  }
  for (const server::ContributionDigest& c : e.contributions) {
    fields.push_back(c.digest_hex);
  }
  return std::any_of(fields.begin(), fields.end(), [&](const std::string& f) {
    return absl::StrContains(f, needle);
  });
}

TEST(ShareNcclUniqueIdTest, MembersGetRankZerosIdAndOnlyItsDigestIsAudited) {
  ClusterOptions options(3);
  options.audit = true;
  TestCluster cluster(options);
  auto members = std::make_unique<Members>(cluster);
  std::vector<absl::StatusOr<NcclUniqueIdBytes>> got(3);
  RunRanks(3, [&](int r) { got[r] = ShareNcclUniqueId(*members->groups[r]); });
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(got[r].ok()) << got[r].status();
  const NcclUniqueIdBytes id = *got[0];
  EXPECT_EQ(*got[1], id);
  EXPECT_EQ(*got[2], id);
  // A real id from ncclGetUniqueId: not all zeros, and a second one differs.
  EXPECT_NE(id, NcclUniqueIdBytes{});
  RunRanks(3, [&](int r) { got[r] = ShareNcclUniqueId(*members->groups[r]); });
  ASSERT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_NE(*got[0], id);
  members->ExpectNextRoundWorks();

  const std::string digest =
      DigestToHex(HashContent(DigestAlgorithm::kBlake3, id.data(), id.size()));
  const std::string raw(id.begin(), id.end());
  const std::string hex = absl::BytesToHexString(raw);
  EXPECT_TRUE(cluster.events().WaitFor(
      [&](const server::ServerEvent& e) {
        return e.kind == server::EventKind::kContributionComplete &&
               e.rank == 0 && e.digest_hex == digest;
      },
      absl::Seconds(10)));
  EXPECT_FALSE(cluster.events().WaitFor(
      [&](const server::ServerEvent& e) {
        return Mentions(e, hex) || Mentions(e, raw) ||
               Mentions(e, absl::Base64Escape(raw));
      },
      absl::Milliseconds(1)));

  members.reset();
  cluster.StopServer();
  const std::string audit = ReadFileToString(cluster.audit_path()).value();
  EXPECT_FALSE(absl::StrContains(audit, raw));
  EXPECT_FALSE(absl::StrContains(audit, hex));
  EXPECT_FALSE(absl::StrContains(audit, absl::Base64Escape(raw)));
  // Rank 0's contribution record and the commit carry the id's digest.
  bool contribution = false, commit = false;
  for (const nlohmann::json& record : ReadAuditRecords(cluster.audit_path())) {
    if (record["action"] == "contribution" && record["rank"] == 0 &&
        record["collective_seq"] == 0) {
      EXPECT_EQ(record["digest_algorithm"], "blake3") << record;
      EXPECT_EQ(record["digest"], digest) << record;
      EXPECT_EQ(record["op"], "ALL_GATHER_BYTES") << record;
      EXPECT_EQ(record["bytes"], kNcclUniqueIdBytes) << record;
      contribution = true;
    }
    if (record["action"] == "commit" && record["collective_seq"] == 0) {
      EXPECT_EQ(record["digest_algorithm"], "blake3") << record;
      EXPECT_EQ(record["digests"][0]["digest"], digest) << record;
      commit = true;
    }
  }
  EXPECT_TRUE(contribution);
  EXPECT_TRUE(commit);
}

// A node whose device list is bad fails before any CUDA call and tells the
// others through the GPU-count exchange, so no node waits in NCCL's init
// for ranks that never come. Rank 1's own list is fine; without a GPU it
// fails on its own (no device), with one on rank 0's answer.
TEST(NcclCommunicatorsTest, ABadDeviceListFailsEveryNode) {
  TestCluster cluster(2);
  Members members(cluster);
  const std::vector<std::vector<int>> devices = {{0, 0}, {0}};
  std::vector<absl::Status> got(2);
  RunRanks(2, [&](int r) {
    got[r] = NcclCommunicators::Create(*members.groups[r], devices[r]).status();
  });
  EXPECT_EQ(got[0].code(), absl::StatusCode::kInvalidArgument) << got[0];
  EXPECT_THAT(std::string(got[0].message()),
              ::testing::HasSubstr("entry 1 (0) repeats entry 0"));
  if (CudaDeviceCount().ok()) {
    EXPECT_EQ(got[1].code(), absl::StatusCode::kInvalidArgument) << got[1];
    EXPECT_THAT(std::string(got[1].message()),
                ::testing::HasSubstr("repeats entry 0"));
  } else {
    EXPECT_EQ(got[1], CudaDeviceCount().status());
  }
  members.ExpectNextRoundWorks();
}

}  // namespace
}  // namespace fedgather::testing
