#include "server/relay/round_restore.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/content_hasher.h"
#include "common/fingerprint.h"
#include "common/frame_codec.h"
#include "server/journal/journal_file.h"
#include "server/relay/journal_recorder.h"

namespace fedgather::server {
namespace {

grpc::ByteBuffer BufferOf(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// Hashes a replayed chunk's payload into its rank's upload hash, and keeps
// the payload where the round reduces rather than forwards it.
class ReplaySink : public ChunkSink {
 public:
  ReplaySink(ContentHasher* hasher, bool keep) : hasher_(hasher), keep_(keep) {}
  absl::Status Begin(const ChunkMeta& meta) override {
    meta_ = meta;
    return absl::OkStatus();
  }
  void Data(const uint8_t* data, size_t size) override {
    hasher_->Update(data, size);
    if (keep_) data_.append(reinterpret_cast<const char*>(data), size);
  }
  const ChunkMeta& meta() const { return meta_; }
  const std::string& data() const { return data_; }

 private:
  ContentHasher* hasher_;
  const bool keep_;
  ChunkMeta meta_;
  std::string data_;
};

}  // namespace

absl::StatusOr<RestoredRound> RestoreRound(RoundOptions options,
                                           const std::string& path,
                                           absl::Time now) {
  const int world = static_cast<int>(options.identities.size());
  const DigestAlgorithm algorithm = options.digest;
  auto round = std::make_shared<Round>(std::move(options));
  std::vector<ContentHasher> hashers;
  hashers.reserve(world);
  for (int r = 0; r < world; ++r) hashers.emplace_back(algorithm);
  v1::Op op = v1::OP_UNSPECIFIED;
  PendingCallbacks replayed;  // dropped: they happened before the restart
  auto bad = [&](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat("journal ", path, " of ", round->Describe(), ": ", what));
  };
  absl::StatusOr<int64_t> valid =
      ReadJournal(path, [&](JournalRecord record) -> absl::Status {
        // Compared unsigned: a rank past INT_MAX must not turn negative.
        if (record.rank >= static_cast<uint32_t>(world)) {
          return bad(absl::StrCat("a record names rank ", record.rank,
                                  ", out of range for world size ", world));
        }
        const int rank = static_cast<int>(record.rank);
        grpc::ByteBuffer frame = BufferOf(record.payload);
        switch (static_cast<RoundRecord>(record.kind)) {
          case RoundRecord::kAttach: {
            v1::CollectiveFrame decoded;
            grpc::ByteBuffer copy = frame;
            absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
                DecodeFrame(copy, &decoded, nullptr);
            if (!kind.ok() || *kind != v1::CollectiveFrame::kHeader) {
              return bad("an attach record holds no header");
            }
            const v1::CollectiveHeader& header = decoded.header();
            absl::StatusOr<Fingerprint> fingerprint =
                FingerprintFromProto(header.tensors(), "a journaled header");
            if (!fingerprint.ok()) return bad(fingerprint.status().message());
            if (op == v1::OP_UNSPECIFIED) op = header.op();
            AttachRequest request;
            request.rank = rank;
            request.peer = "(restored)";
            request.header = header;
            request.fingerprint = *std::move(fingerprint);
            request.header_frame = std::move(frame);
            request.upload_bytes =
                UploadBytes(rank, request.header, request.fingerprint);
            absl::Status attached =
                round->Attach(std::move(request), &replayed);
            if (!attached.ok()) return bad(attached.message());
            return absl::OkStatus();
          }
          case RoundRecord::kChunk: {
            ReplaySink sink(&hashers[rank], op == v1::ALL_REDUCE);
            v1::CollectiveFrame unused;
            grpc::ByteBuffer copy = frame;
            absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
                DecodeFrame(copy, &unused, &sink);
            if (!kind.ok() || *kind != v1::CollectiveFrame::kChunk ||
                sink.meta().rank != record.rank) {
              return bad(absl::StrCat("a chunk record of rank ", rank,
                                      " holds no chunk of that rank"));
            }
            if (op == v1::ALL_REDUCE) {
              round->OfferReduceChunk(
                  rank, frame, sink.meta(),
                  reinterpret_cast<const uint8_t*>(sink.data().data()),
                  &replayed);
            } else {
              round->ReplayChunk(rank, std::move(frame),
                                 static_cast<int64_t>(sink.meta().size),
                                 record.payload_offset, &replayed);
            }
            return absl::OkStatus();
          }
          case RoundRecord::kEnd:
          case RoundRecord::kEndDigest: {
            // A kEnd record holds a SHA-256; a kEndDigest record says its
            // algorithm in its first byte.
            absl::string_view payload = record.payload;
            DigestAlgorithm ended = DigestAlgorithm::kSha256;
            if (record.kind == static_cast<uint8_t>(RoundRecord::kEndDigest)) {
              if (payload.empty()) return bad("an end record holds no digest");
              absl::StatusOr<DigestAlgorithm> named = DigestAlgorithmFromProto(
                  static_cast<v1::DigestAlgorithm>(
                      static_cast<uint8_t>(payload[0])),
                  "an end record");
              if (!named.ok()) return bad(named.status().message());
              ended = *named;
              payload.remove_prefix(1);
            }
            Digest digest;
            if (!DigestFromBytes(payload, &digest)) {
              return bad("an end record holds no 32-byte digest");
            }
            if (ended != algorithm) {
              return bad(absl::StrCat("rank ", rank, "'s end record holds a ",
                                      DigestAlgorithmName(ended),
                                      " digest but the epoch uses ",
                                      DigestAlgorithmName(algorithm)));
            }
            round->EndContribution(rank, digest, &replayed);
            return absl::OkStatus();
          }
          case RoundRecord::kQuorumClosed:
            round->CloseQuorum(&replayed);
            return absl::OkStatus();
        }
        return bad(absl::StrCat("unknown record kind ", record.kind));
      });
  replayed.Discard();
  if (!valid.ok()) return valid.status();
  if (round->Finished() && !round->Complete()) {
    return bad("it replays to a failed round");
  }
  absl::StatusOr<std::unique_ptr<JournalFile>> journal =
      JournalFile::OpenForAppend(path, *valid);
  if (!journal.ok()) return journal.status();
  round->Restored(now, std::move(hashers),
                  std::make_unique<JournalRecorder>(*std::move(journal)));
  return RestoredRound{std::move(round), *valid};
}

}  // namespace fedgather::server
