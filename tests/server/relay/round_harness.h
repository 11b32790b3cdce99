// RoundHarness: a gtest fixture that drives a Round by hand, as the
// collective streams would: attach ranks, offer chunks, end contributions,
// and pump what the round has for each rank into a Received log. Shared by
// round_test.cc and round_restore_test.cc.
#ifndef FEDGATHER_TESTS_SERVER_RELAY_ROUND_HARNESS_H_
#define FEDGATHER_TESTS_SERVER_RELAY_ROUND_HARNESS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/content_hasher.h"
#include "common/fingerprint.h"
#include "common/frame_codec.h"
#include "gtest/gtest.h"
#include "server/events/event_sink.h"
#include "server/events/pending_callbacks.h"
#include "server/relay/round.h"
#include "tests/server/events/recording_events.h"

namespace fedgather::server {

// Records the round's calls into a stream; callbacks run on the test thread.
class FakeRoundStream : public RoundStream {
 public:
  void WakeWriter() override { ++wakes; }
  void ResumeReading() override { ++resumes; }
  int wakes = 0;
  int resumes = 0;
};

// What one rank's stream has written to its client.
struct Received {
  // "header 1", "chunk 1 t0 @4" in arrival order.
  std::vector<std::string> log;
  // Payload bytes by source rank, concatenated in arrival order.
  std::vector<std::string> data_by_rank = std::vector<std::string>(8);
  bool committed = false;
  v1::Commit commit;
  bool finished = false;
  absl::Status status;
};

class ChunkRecorder : public ChunkSink {
 public:
  explicit ChunkRecorder(Received* got) : got_(got) {}
  absl::Status Begin(const ChunkMeta& meta) override {
    rank_ = meta.rank;
    got_->log.push_back(absl::StrCat("chunk ", meta.rank, " t",
                                     meta.tensor_index, " @", meta.offset));
    return absl::OkStatus();
  }
  void Data(const uint8_t* data, size_t size) override {
    got_->data_by_rank[rank_].append(reinterpret_cast<const char*>(data), size);
  }

 private:
  Received* got_;
  uint32_t rank_ = 0;
};

inline void DecodeInto(grpc::ByteBuffer frame, Received* got) {
  ChunkRecorder sink(got);
  v1::CollectiveFrame message;
  absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
      DecodeFrame(frame, &message, &sink);
  ASSERT_TRUE(kind.ok()) << kind.status();
  switch (*kind) {
    case v1::CollectiveFrame::kChunk:
      break;
    case v1::CollectiveFrame::kHeader:
      got->log.push_back(absl::StrCat("header ", message.header().rank()));
      break;
    case v1::CollectiveFrame::kClaims:
      got->log.push_back("claims");
      break;
    case v1::CollectiveFrame::kCommit:
      got->log.push_back("commit");
      got->committed = true;
      got->commit = message.commit();
      break;
    default:
      ADD_FAILURE() << "the round sent frame kind " << *kind;
  }
}

// Next asks the round what `rank`'s stream does next, and runs what that
// queued (as a stream does once it has released its own lock).
inline Outgoing Next(Round& round, int rank) {
  PendingCallbacks callbacks;
  return round.NextOutgoing(rank, &callbacks);
}

// PumpOne does what a stream does once it is woken and not writing: ask the
// round what is next and, for a frame, "write" it. Returns the kind.
inline Outgoing::Kind PumpOne(Round& round, int rank, Received* got) {
  Outgoing out = Next(round, rank);
  switch (out.kind) {
    case Outgoing::Kind::kNothing:
      break;
    case Outgoing::Kind::kFrame: {
      DecodeInto(out.frame, got);
      PendingCallbacks callbacks;
      round.WriteDone(rank, /*ok=*/true, &callbacks);
      callbacks.Run();
      break;
    }
    case Outgoing::Kind::kCommitAndFinish:
      DecodeInto(out.frame, got);
      got->finished = true;
      got->status = absl::OkStatus();
      break;
    case Outgoing::Kind::kFinish:
      got->finished = true;
      got->status = out.status;
      break;
  }
  return out.kind;
}

// Pump sends everything the round has for `rank` now.
inline void Pump(Round& round, int rank, Received* got) {
  for (int i = 0; i < 1000; ++i) {
    const Outgoing::Kind kind = PumpOne(round, rank, got);
    if (kind != Outgoing::Kind::kFrame) return;
  }
  ADD_FAILURE() << "rank " << rank << " never ran out of frames";
}

constexpr int64_t kChunkBytes = 4;
// What one such chunk is charged against max_buffered_bytes.
constexpr int64_t kChunkCharge = kChunkBytes + Round::kFrameChargeBytes;

// One F32 tensor of 2 elements: 8 bytes, sent as two 4-byte chunks.
inline Fingerprint TwoFloats() { return {TensorSpec{"w", DType::kF32, {2}}}; }

class RoundHarness : public ::testing::Test {
 protected:
  std::unique_ptr<Round> MakeRound(
      int world, int64_t max_buffered_bytes = int64_t{1} << 20,
      absl::Time deadline = absl::InfiniteFuture(),
      absl::Duration timeout = absl::InfiniteDuration()) {
    return std::make_unique<Round>(
        MakeOptions(world, max_buffered_bytes, deadline, timeout));
  }

  // MakeOptions is the options MakeRound uses; it resets the streams,
  // payloads and what they received.
  RoundOptions MakeOptions(int world,
                           int64_t max_buffered_bytes = int64_t{1} << 20,
                           absl::Time deadline = absl::InfiniteFuture(),
                           absl::Duration timeout = absl::InfiniteDuration()) {
    RoundOptions options;
    options.group = "demo";
    options.epoch = 1;
    options.seq = 0;
    const std::vector<std::string> names = {"site-a", "site-b", "site-c"};
    options.identities.assign(names.begin(), names.begin() + world);
    options.max_buffered_bytes = max_buffered_bytes;
    options.deadline = deadline;
    options.timeout = timeout;
    options.min_quorum = min_quorum_;
    options.quorum_deadline = quorum_deadline_;
    options.quorum_wait = absl::Seconds(10);
    options.resume_grace = resume_grace_;
    options.digest = digest_;
    options.events = &events_;
    options.on_finished = [this](uint64_t seq, const absl::Status& outcome) {
      finished_.emplace_back(seq, outcome);
    };
    streams_.clear();
    payloads_.clear();
    received_.assign(world, Received());
    for (int r = 0; r < world; ++r) {
      streams_.push_back(std::make_shared<FakeRoundStream>());
      std::string payload;
      for (int i = 0; i < 8; ++i) {
        payload.push_back(static_cast<char>(0x10 * (r + 1) + i));
      }
      payloads_.push_back(payload);
    }
    return options;
  }

  // HeaderFrame is the frame a client sends for that header (which an
  // ALL_REDUCE round journals, so it must carry the reduction).
  static grpc::ByteBuffer HeaderFrame(
      int rank, v1::Op op, const Fingerprint& fingerprint,
      v1::ReduceOp reduce = v1::REDUCE_UNSPECIFIED, double weight = 0) {
    v1::CollectiveFrame frame;
    v1::CollectiveHeader* header = frame.mutable_header();
    header->set_group("demo");
    header->set_epoch(1);
    header->set_seq(0);
    header->set_op(op);
    header->set_rank(rank);
    header->set_reduce(reduce);
    header->set_weight(weight);
    FingerprintToProto(fingerprint, header->mutable_tensors());
    return EncodeFrame(frame);
  }

  // Request is `rank`'s AttachRequest, with its stream.
  AttachRequest Request(int rank, std::string peer,
                        const v1::CollectiveHeader& header,
                        const Fingerprint& fingerprint,
                        grpc::ByteBuffer header_frame) {
    AttachRequest request;
    request.rank = rank;
    request.peer = std::move(peer);
    request.header = header;
    request.fingerprint = fingerprint;
    request.header_frame = std::move(header_frame);
    request.stream = streams_[rank];
    request.upload_bytes =
        UploadBytes(rank, request.header, request.fingerprint);
    return request;
  }

  absl::Status Attach(Round& round, int rank, v1::Op op = v1::ALL_GATHER,
                      const Fingerprint& fingerprint = TwoFloats(),
                      uint32_t root = 0) {
    v1::CollectiveHeader header;
    header.set_op(op);
    header.set_rank(rank);
    header.set_root(root);
    PendingCallbacks callbacks;
    absl::Status status =
        round.Attach(Request(rank, "ipv4:127.0.0.1:1", header, fingerprint,
                             HeaderFrame(rank, op, fingerprint)),
                     &callbacks);
    callbacks.Run();
    return status;
  }

  // Offers chunk `index` (0 or 1) of `rank`'s payload.
  bool Offer(Round& round, int rank, int index) {
    const ChunkMeta meta{static_cast<uint32_t>(rank), 0,
                         static_cast<uint64_t>(index * kChunkBytes),
                         static_cast<uint64_t>(kChunkBytes)};
    PendingCallbacks callbacks;
    const bool more = round.OfferChunk(
        rank, EncodeChunkFrame(meta, payloads_[rank].data() + meta.offset),
        kChunkBytes, &callbacks);
    callbacks.Run();
    return more;
  }

  // AttachReduce, OfferReduce and EndWith are Attach, Offer and End for an
  // ALL_REDUCE round: one 8-byte chunk of two floats per rank.
  absl::Status AttachReduce(Round& round, int rank, v1::ReduceOp reduce,
                            double weight = 1) {
    v1::CollectiveHeader header;
    header.set_op(v1::ALL_REDUCE);
    header.set_rank(rank);
    header.set_reduce(reduce);
    header.set_weight(weight);
    PendingCallbacks callbacks;
    absl::Status status = round.Attach(
        Request(rank, "ipv4:127.0.0.1:1", header, TwoFloats(),
                HeaderFrame(rank, v1::ALL_REDUCE, TwoFloats(), reduce, weight)),
        &callbacks);
    callbacks.Run();
    return status;
  }

  bool OfferReduce(Round& round, int rank, const std::vector<float>& values) {
    const ChunkMeta meta{static_cast<uint32_t>(rank), 0, 0, 8};
    PendingCallbacks callbacks;
    const uint8_t* data = reinterpret_cast<const uint8_t*>(values.data());
    const bool more = round.OfferReduceChunk(rank, EncodeChunkFrame(meta, data),
                                             meta, data, &callbacks);
    callbacks.Run();
    return more;
  }

  void EndWith(Round& round, int rank, const std::vector<float>& values) {
    ContentHasher hasher(digest_);
    hasher.Update(values.data(), 8);
    PendingCallbacks callbacks;
    round.EndContribution(rank, hasher.Finish(), &callbacks);
    callbacks.Run();
  }

  Digest DigestOf(int rank) const {
    return HashContent(digest_, payloads_[rank].data(), payloads_[rank].size());
  }

  void End(Round& round, int rank) {
    PendingCallbacks callbacks;
    round.EndContribution(rank, DigestOf(rank), &callbacks);
    callbacks.Run();
  }

  void PumpAll(Round& round) {
    for (size_t r = 0; r < received_.size(); ++r) {
      Pump(round, static_cast<int>(r), &received_[r]);
    }
  }

  // Every rank's stream was told to finish with `status`.
  void ExpectAllFinishedWith(Round& round, const absl::Status& status) {
    for (size_t r = 0; r < received_.size(); ++r) {
      Outgoing out = Next(round, static_cast<int>(r));
      EXPECT_EQ(out.kind, Outgoing::Kind::kFinish) << "rank " << r;
      EXPECT_EQ(out.status, status) << "rank " << r;
    }
  }

  // MakeQuorumRound makes a round of 3 with min_quorum 2, whose quorum
  // deadline is at 100 s and hard deadline at 200 s (Unix time).
  std::unique_ptr<Round> MakeQuorumRound() {
    min_quorum_ = 2;
    quorum_deadline_ = absl::FromUnixSeconds(100);
    return MakeRound(3, int64_t{1} << 20, absl::FromUnixSeconds(200));
  }

  // Resume resumes `rank` after `frames` frames, declaring `digest`.
  // An ALL_REDUCE rank (reduce set) resumes with AttachReduce's header.
  absl::StatusOr<Round::ResumePoint> Resume(
      Round& round, int rank, uint64_t frames, const Digest& digest,
      v1::ReduceOp reduce = v1::REDUCE_UNSPECIFIED) {
    const v1::Op op =
        reduce == v1::REDUCE_UNSPECIFIED ? v1::ALL_GATHER : v1::ALL_REDUCE;
    v1::CollectiveHeader header;
    header.set_op(op);
    header.set_rank(rank);
    if (op == v1::ALL_REDUCE) {
      header.set_reduce(reduce);
      header.set_weight(1);
    }
    header.set_resume(true);
    header.set_frames_received(frames);
    header.set_contribution_digest(digest.data(), digest.size());
    PendingCallbacks callbacks;
    absl::StatusOr<Round::ResumePoint> point =
        round.Resume(Request(rank, "ipv4:127.0.0.1:2", header, TwoFloats(),
                             HeaderFrame(rank, op, TwoFloats(), header.reduce(),
                                         header.weight())),
                     &callbacks);
    callbacks.Run();
    return point;
  }

  // RankZeroEndedThenBroke: a round of 2 where rank 0 uploaded everything,
  // ended, and then lost its stream.
  std::unique_ptr<Round> RankZeroEndedThenBroke() {
    resume_grace_ = absl::Seconds(10);
    std::unique_ptr<Round> round = MakeRound(2);
    EXPECT_TRUE(Attach(*round, 0).ok());
    EXPECT_TRUE(Attach(*round, 1).ok());
    EXPECT_TRUE(Offer(*round, 0, 0));
    EXPECT_TRUE(Offer(*round, 0, 1));
    End(*round, 0);
    PendingCallbacks callbacks;
    round->StreamLost(0, "closed", absl::FromUnixSeconds(10), &callbacks);
    callbacks.Run();
    return round;
  }

  void CheckDeadline(Round& round, absl::Time now) {
    PendingCallbacks callbacks;
    round.CheckDeadline(now, &callbacks);
    callbacks.Run();
  }

  // Set before MakeRound for resumable streams.
  absl::Duration resume_grace_ = absl::ZeroDuration();
  DigestAlgorithm digest_ = DigestAlgorithm::kBlake3;  // the round's
  // Set before MakeRound for a quorum round.
  int min_quorum_ = 0;
  absl::Time quorum_deadline_ = absl::InfiniteFuture();
  testing::RecordingEvents events_;
  std::vector<std::shared_ptr<FakeRoundStream>> streams_;
  std::vector<std::string> payloads_;
  std::vector<Received> received_;
  std::vector<std::pair<uint64_t, absl::Status>> finished_;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_TESTS_SERVER_RELAY_ROUND_HARNESS_H_
