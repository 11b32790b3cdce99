// CollectiveCall over a DataPlane (client/data_plane.h) that a test drives:
// an in-memory plane that plays the server of a one-rank round on its own
// thread. It checks what the call sends through the seam, that it accepts a
// commit of the bytes it sent, and that it resumes a broken stream, and
// gives up on a final one, by opening streams on the plane.
#include "client/collective_call.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/data_plane.h"
#include "common/content_hasher.h"
#include "common/frame_codec.h"

namespace fedgather {
namespace {

// Hashes and collects the chunks a stream carries.
class CollectingSink : public ChunkSink {
 public:
  absl::Status Begin(const ChunkMeta& meta) override {
    ++chunks;
    return absl::OkStatus();
  }
  void Data(const uint8_t* data, size_t size) override {
    hasher.Update(data, size);
    bytes.append(reinterpret_cast<const char*>(data), size);
  }
  int chunks = 0;
  ContentHasher hasher{DigestAlgorithm::kBlake3};
  std::string bytes;
};

// What the fake server does with a stream: commit what it received, end
// the stream as broken after its header, or end it with a final error.
enum class Script { kCommit, kBreak, kFail };

// A stream of the fake plane. Every handler call runs on the stream's own
// thread, in order, as a transport's callback thread would. What it carries
// goes to `sink`, which its plane owns: the call destroys the stream.
class FakeStream : public FrameStream {
 public:
  FakeStream(Script script, FrameHandler* handler, CollectingSink* sink)
      : script_(script),
        handler_(handler),
        sink_(sink),
        thread_([this] { Loop(); }) {}
  ~FakeStream() override {
    Post(nullptr);
    thread_.join();
  }

  void Start() override {
    if (script_ == Script::kBreak) {
      End(grpc::Status(grpc::UNAVAILABLE, "the fake connection broke"), false);
      return;
    }
    if (script_ == Script::kFail) {
      End(grpc::Status(grpc::FAILED_PRECONDITION, "the fake round failed"),
          true);
      return;
    }
    Post([this] { handler_->OnWritten(true); });
  }
  void Write(grpc::ByteBuffer frame) override {
    v1::CollectiveFrame message;
    absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
        DecodeFrame(frame, &message, sink_);
    ASSERT_TRUE(kind.ok()) << kind.status();
    Post([this] { handler_->OnWritten(true); });
  }
  void WritesDone() override {
    v1::CollectiveFrame commit;
    commit.mutable_commit()->set_digest_algorithm(v1::DIGEST_BLAKE3);
    v1::RankDigest* entry = commit.mutable_commit()->add_contributions();
    entry->set_rank(0);
    entry->set_identity("site-1");
    const Digest digest = sink_->hasher.Finish();
    entry->set_digest(digest.data(), digest.size());
    auto buffer = std::make_shared<grpc::ByteBuffer>(EncodeFrame(commit));
    Post([this, buffer] { handler_->OnFrame(*buffer); });
    End(grpc::Status::OK, true);
  }
  void Cancel() override {
    End(grpc::Status(grpc::CANCELLED, "cancelled"), false);
  }

 private:
  void End(grpc::Status status, bool final) {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    ended_ = true;
    tasks_.push_back(
        [this, status, final] { handler_->OnEnded(status, final); });
  }
  // Post queues a handler call; nullptr stops the thread.
  void Post(std::function<void()> task) {
    absl::MutexLock lock(&mu_);
    if (task == nullptr) {
      stopping_ = true;
    } else if (!ended_) {
      tasks_.push_back(std::move(task));
    }
  }
  void Loop() {
    for (;;) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](FakeStream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
              return s->stopping_ || !s->tasks_.empty();
            },
            this));
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();  // never under mu_
    }
  }

  const Script script_;
  FrameHandler* const handler_;
  CollectingSink* const sink_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is built
};

// Opens one FakeStream per attempt, following `scripts` (the last repeats),
// and keeps the headers it was given.
class FakePlane : public DataPlane {
 public:
  explicit FakePlane(std::vector<Script> scripts)
      : scripts_(std::move(scripts)) {}

  std::unique_ptr<FrameStream> Open(grpc::ByteBuffer header,
                                    FrameHandler* handler) override {
    v1::CollectiveFrame frame;
    EXPECT_EQ(DecodeFrame(header, &frame, nullptr)
                  .value_or(v1::CollectiveFrame::KIND_NOT_SET),
              v1::CollectiveFrame::kHeader);
    headers.push_back(frame.header());
    const Script script =
        scripts_[std::min(headers.size(), scripts_.size()) - 1];
    sinks.push_back(std::make_unique<CollectingSink>());
    return std::make_unique<FakeStream>(script, handler, sinks.back().get());
  }

  std::vector<v1::CollectiveHeader> headers;  // by attempt
  // What each attempt's stream carried, by attempt (touched by the call's
  // writes, one at a time).
  std::vector<std::unique_ptr<CollectingSink>> sinks;

 private:
  std::vector<Script> scripts_;
};

// Places this rank's part of one tensor in `memory`.
class OneTarget : public ReceiveTarget {
 public:
  explicit OneTarget(uint8_t* memory) : memory_(memory) {}
  absl::StatusOr<uint8_t*> Place(int, int, const TensorSpec&) override {
    return memory_;
  }

 private:
  uint8_t* memory_;
};

CollectiveSetup OneRankSetup() {
  CollectiveSetup setup;
  setup.group = "demo";
  setup.epoch = 1;
  setup.seq = 4;
  setup.op = v1::ALL_GATHER;
  setup.rank = 0;
  setup.world_size = 1;
  setup.max_chunk_bytes = 1 << 20;
  setup.upload_chunk_bytes = 3;  // 10 bytes: 4 chunks
  setup.resume_grace = absl::Seconds(10);
  return setup;
}

const std::vector<uint8_t> kBytes = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};

// What one call over a plane gave.
struct Outcome {
  absl::Status status;
  std::vector<uint8_t> out;  // this rank's row of the output
  std::vector<int> contributors;
  TransferStats stats;
};

// RunOverPlane runs one ALL_GATHER of kBytes over `plane`.
Outcome RunOverPlane(const CollectiveSetup& setup, FakePlane& plane) {
  const ConstHostTensor input{{"t", DType::kU8, {10}}, kBytes.data()};
  Outcome outcome;
  outcome.out.assign(10, 0xff);
  OneTarget target(outcome.out.data());
  CollectiveCall call(setup, {&input, 1}, &target);
  outcome.status = call.Prepare();
  if (!outcome.status.ok()) return outcome;
  call.Start(&plane);
  outcome.status = call.Wait(absl::Seconds(30));
  outcome.stats = call.stats();
  if (outcome.status.ok()) outcome.contributors = call.contributors();
  return outcome;
}

TEST(CollectiveCallDataPlaneTest, SendsThroughThePlaneAndAcceptsItsCommit) {
  FakePlane plane({Script::kCommit});
  const Outcome got = RunOverPlane(OneRankSetup(), plane);
  ASSERT_TRUE(got.status.ok()) << got.status;
  ASSERT_EQ(plane.headers.size(), 1u);
  EXPECT_EQ(plane.headers[0].group(), "demo");
  EXPECT_EQ(plane.headers[0].seq(), 4u);
  EXPECT_FALSE(plane.headers[0].resume());
  EXPECT_EQ(plane.sinks[0]->chunks, 4);
  EXPECT_EQ(plane.sinks[0]->bytes, std::string(kBytes.begin(), kBytes.end()));
  EXPECT_EQ(got.out, kBytes);  // this rank's own part, placed by Prepare
  EXPECT_EQ(got.contributors, std::vector<int>{0});
  EXPECT_EQ(got.stats.streams, 1);
  EXPECT_EQ(got.stats.payload_bytes_sent, 10);
  EXPECT_EQ(plane.headers[0].digest_algorithm(), v1::DIGEST_BLAKE3);
}

// The fake plane commits in BLAKE3; an epoch of SHA-256 takes no such
// commit, however its digests read.
TEST(CollectiveCallDataPlaneTest, ACommitInAnotherDigestAlgorithmIsDataLoss) {
  FakePlane plane({Script::kCommit});
  CollectiveSetup setup = OneRankSetup();
  setup.digest = DigestAlgorithm::kSha256;
  const Outcome got = RunOverPlane(setup, plane);
  ASSERT_EQ(plane.headers.size(), 1u);
  EXPECT_EQ(plane.headers[0].digest_algorithm(), v1::DIGEST_SHA256);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kDataLoss) << got.status;
  EXPECT_EQ(got.status.message(),
            "the commit names its digests in blake3 but the epoch names "
            "contributions by sha256");
}

TEST(CollectiveCallDataPlaneTest, ABrokenStreamIsResumedOnANewStream) {
  // The first stream breaks; the second ends with the round's failure.
  FakePlane plane({Script::kBreak, Script::kFail});
  const Outcome got = RunOverPlane(OneRankSetup(), plane);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kFailedPrecondition)
      << got.status;
  ASSERT_EQ(plane.headers.size(), 2u);
  EXPECT_FALSE(plane.headers[0].resume());
  EXPECT_TRUE(plane.headers[1].resume());
  EXPECT_EQ(got.stats.streams, 2);
}

// A stream the server ended (final), and a break when the grace is zero,
// end the call: no second stream is opened.
TEST(CollectiveCallDataPlaneTest, AFinalEndOrABreakWithoutGraceIsNotResumed) {
  struct Case {
    Script first;
    absl::Duration grace;
    absl::StatusCode code;
  };
  for (const Case& c : {Case{Script::kFail, absl::Seconds(10),
                             absl::StatusCode::kFailedPrecondition},
                        Case{Script::kBreak, absl::ZeroDuration(),
                             absl::StatusCode::kUnavailable}}) {
    CollectiveSetup setup = OneRankSetup();
    setup.resume_grace = c.grace;
    FakePlane plane({c.first, Script::kCommit});
    const Outcome got = RunOverPlane(setup, plane);
    EXPECT_EQ(got.status.code(), c.code) << got.status;
    EXPECT_EQ(plane.headers.size(), 1u);
  }
}

}  // namespace
}  // namespace fedgather
