// libFuzzer target: the server's collective protocol as a state machine
// (issue 17). It drives one GroupState (server/membership/group_state.h) and
// the Rounds it makes, with an injected clock, as 1 to 5 simulated members
// would: joins, session losses and resumes, policy reloads, heartbeats, time,
// and on each collective stream the frames a member may send (headers with any
// op, root, reduction, weight and fingerprint; chunks of any size, offset,
// tensor and rank; ends with right or wrong digests; frames out of place;
// cancels; resumes after any number of frames; writes that fail). The read
// path of server/rpc/collective_reactor.cc is mirrored by SimStream (it cannot
// run without gRPC): the same validation in the same order, then the same
// calls into the round. Access control and contribution limits are not
// modelled.
//
// The input is read front to back, one byte at a time (zeros once it runs
// out): a setup, then steps (see Step below). After the last step every
// member cooperates (uploads the rest of what it started, the others join
// the rounds in flight, every stream reads all it is sent), then the clock
// passes every deadline. The target then aborts when:
//   - a round committed on some rank but its result differs from a
//     reference computed here from what the ranks uploaded
//     (tests/fuzz/reduce_reference.h for ALL_REDUCE; rank-ordered
//     contributions for the gathers and broadcast), or its commit lists
//     other contributors or digests than the ranks that attached;
//   - a round failed but its ranks were told different statuses, or both
//     committed and failed, or reported more than one outcome;
//   - a stream is still open (a rank left waiting), a round still held is
//     unfinished, or it still counts buffered bytes (Round::BufferedBytes).
//
// Seeds: tests/fuzz/corpus/collective_protocol/, made by
// tests/fuzz/make_collective_protocol_seeds.py.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/chunk_sequence.h"
#include "common/content_hasher.h"
#include "common/fingerprint.h"
#include "common/frame_codec.h"
#include "server/events/event_sink.h"
#include "server/events/pending_callbacks.h"
#include "server/membership/group_config.h"
#include "server/membership/group_state.h"
#include "server/relay/round.h"
#include "tests/fuzz/reduce_reference.h"

namespace fedgather::server {
namespace {

constexpr int kMaxWorld = 5;
constexpr int kMaxSteps = 160;
constexpr char kGroup[] = "demo";
const absl::Time kStart = absl::FromUnixSeconds(1000000);

[[noreturn]] void Violation(const std::string& what) {
  std::fprintf(stderr, "collective_protocol_fuzzer: VIOLATION: %s\n",
               what.c_str());
  std::fflush(stderr);
  std::abort();
}

std::string Identity(int index) { return absl::StrCat("site-", index); }

// The digest of `bytes` in `algorithm`, as the wire carries it.
std::string DigestOf(DigestAlgorithm algorithm, const std::string& bytes) {
  return DigestBytes(HashContent(algorithm, bytes.data(), bytes.size()));
}

// Input reads the fuzz bytes front to back; zeros once they run out.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return size_ == 0; }
  uint8_t Byte() {
    if (size_ == 0) return 0;
    --size_;
    return *data_++;
  }
  int Below(int n) { return Byte() % n; }
  // Bytes returns n bytes, padded with a pattern once the input runs out.
  std::string Bytes(size_t n, int salt) {
    std::string out(n, '\0');
    for (size_t i = 0; i < n; ++i) {
      out[i] = static_cast<char>(
          size_ > 0 ? Byte() : (salt * 29 + static_cast<int>(i) * 7 + 1));
    }
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

// What the members mean to do in one round: the op, its parameters and each
// rank's fingerprint (ALL_GATHER_V and ALL_GATHER_BYTES vary the first
// dimension by rank).
struct Plan {
  v1::Op op = v1::ALL_GATHER;
  v1::ReduceOp reduce = v1::SUM;
  uint32_t root = 0;
  std::vector<Fingerprint> fingerprint;  // by rank
  std::vector<double> weight;            // by rank
};

constexpr DType kDTypes[] = {
    DType::kF32, DType::kI32, DType::kF16, DType::kBF16, DType::kF64,
    DType::kI64, DType::kI16, DType::kI8,  DType::kU8,   DType::kBool};

Plan MakePlan(Input& in, int world) {
  Plan plan;
  constexpr v1::Op kOps[] = {v1::ALL_GATHER, v1::ALL_REDUCE, v1::BROADCAST,
                             v1::ALL_GATHER_V, v1::ALL_GATHER_BYTES};
  constexpr v1::ReduceOp kReduce[] = {v1::SUM, v1::MIN, v1::MAX, v1::MEAN,
                                      v1::WEIGHTED_MEAN};
  plan.op = kOps[in.Below(5)];
  plan.reduce = kReduce[in.Below(5)];
  plan.root = static_cast<uint32_t>(in.Below(world));
  Fingerprint base;
  if (plan.op == v1::ALL_GATHER_BYTES) {
    base.push_back(TensorSpec{"bytes", DType::kU8, {0}});
  } else {
    const int tensors = 1 + in.Below(2);
    for (int t = 0; t < tensors; ++t) {
      TensorSpec spec;
      spec.name = t == 0 ? "w" : "b";
      spec.dtype = kDTypes[in.Below(10)];
      const int rank = in.Below(3);
      for (int d = 0; d < rank; ++d) spec.shape.push_back(in.Below(5));
      if (plan.op == v1::ALL_GATHER_V && spec.shape.empty()) {
        spec.shape.push_back(1);
      }
      base.push_back(std::move(spec));
    }
  }
  const bool varies =
      plan.op == v1::ALL_GATHER_V || plan.op == v1::ALL_GATHER_BYTES;
  constexpr double kWeights[] = {1, 2, 0.5, 3};
  for (int r = 0; r < world; ++r) {
    Fingerprint mine = base;
    if (varies) {
      for (TensorSpec& spec : mine) spec.shape[0] = in.Below(6);
    }
    plan.fingerprint.push_back(std::move(mine));
    plan.weight.push_back(kWeights[in.Below(4)]);
  }
  return plan;
}

// A frame one rank's client received, decoded.
struct Got {
  bool header = false;  // else a chunk
  uint32_t source = 0;  // the header's or chunk's rank
  uint32_t tensor = 0;
  uint64_t offset = 0;
  std::string data;
};

class Collector : public ChunkSink {
 public:
  absl::Status Begin(const ChunkMeta& meta) override {
    meta_ = meta;
    return absl::OkStatus();
  }
  void Data(const uint8_t* data, size_t size) override {
    data_.append(reinterpret_cast<const char*>(data), size);
  }
  ChunkMeta meta_;
  std::string data_;
};

// What the simulation knows about one rank in one round.
struct RankRecord {
  bool attached = false;  // an Attach or Resume of it succeeded
  double weight = 1;      // its header's, at the first attach
  Fingerprint upload;     // what it uploads
  std::string contribution;
  int64_t reduce_bytes = 0;  // ALL_REDUCE bytes it had folded
  std::vector<Got> got;      // what its client holds
  bool committed = false;
  v1::Commit commit;
  std::vector<absl::Status> finishes;  // its attached streams' endings
  // Its stream broke and it may resume: the round keeps its claims on the
  // frames it has not written until the resume grace passes (if the server
  // still checks the round then).
  bool detached = false;
};

// One round (epoch, seq) as the simulation saw it.
struct RoundRecord {
  int world = 0;
  Plan plan;
  // Held to the end, so that every round can be checked then (the server
  // lets go of a round once its streams are done).
  std::shared_ptr<Round> round;
  v1::Op op = v1::OP_UNSPECIFIED;  // of the first attached header
  v1::ReduceOp reduce = v1::REDUCE_UNSPECIFIED;
  uint32_t root = 0;
  Fingerprint fingerprint;  // of the first attached header
  std::vector<RankRecord> ranks;
  // ALL_REDUCE: by tensor and element, the ranks whose copy of the element
  // reached the round, in that order.
  std::vector<std::vector<std::vector<int>>> arrivals;
};

using RoundKey = std::pair<uint64_t, uint64_t>;  // (epoch, seq)

// The server's view of a session.
class FakeSession : public SessionStream {
 public:
  void SendDataPlane(const v1::DataPlaneChosen&) override {}
  void SendJoined(const v1::Joined& message) override {
    joined.push_back(message);
  }
  void Close(const absl::Status& status) override { closed = status; }
  std::vector<v1::Joined> joined;
  absl::Status closed;
};

// Terminal round events by (epoch, seq).
class Outcomes : public EventSink {
 public:
  void OnEvent(const ServerEvent& event) override {
    if (event.kind == EventKind::kRoundCompleted) {
      by_round[RoundKey(event.epoch, event.seq.value_or(~uint64_t{0}))]
          .push_back(absl::OkStatus());
    } else if (event.kind == EventKind::kRoundFailed) {
      by_round[RoundKey(event.epoch, event.seq.value_or(~uint64_t{0}))]
          .push_back(event.status);
    }
  }
  std::map<RoundKey, std::vector<absl::Status>> by_round;
};

// SimStream: one collective stream of a member, the reactor's read path
// (HandleHeader, HandleFrame, UploadSink) without gRPC. The simulation
// decides when it "writes" (Pump).
struct SimStream : public RoundStream {
  void WakeWriter() override {}
  void ResumeReading() override { paused = false; }

  int rank = -1;
  RoundKey key;
  std::shared_ptr<Round> round;  // null once done
  Fingerprint fingerprint;
  Fingerprint upload;
  std::optional<ChunkSequence> sequence;  // refers to `upload`
  std::optional<ContentHasher> hasher;    // in the round's algorithm
  v1::Op op = v1::OP_UNSPECIFIED;
  bool ended = false;   // its end was accepted (or resumed as ended)
  bool reading = true;  // false after the reactor rejected a frame
  bool paused = false;  // waiting for ResumeReading
  bool done = false;    // finished or lost
  int64_t last_chunk = 0;
};

struct Client {
  int index = 0;  // identity site-<index>
  std::shared_ptr<FakeSession> session;
  size_t joined_seen = 0;
  uint64_t epoch = 0;
  int rank = -1;
  uint64_t next_seq = 0;
  std::optional<uint64_t> unfinished;  // a seq whose stream broke
  std::vector<std::shared_ptr<SimStream>> streams;

  std::shared_ptr<SimStream> Live() const {
    for (auto it = streams.rbegin(); it != streams.rend(); ++it) {
      if (!(*it)->done) return *it;
    }
    return nullptr;
  }
};

class Simulation {
 public:
  explicit Simulation(Input& in) : in_(in) {}

  void Run();

 private:
  void Setup();
  void Step();
  // Callbacks run after each change, then Joined messages are taken in.
  void Settle(PendingCallbacks& callbacks);
  void TakeJoined();

  RoundRecord& Record(uint64_t epoch, uint64_t seq);
  void Header(Client& c, bool resume, int mutation);
  void Chunk(Client& c, int size, int mutation);
  void End(Client& c, int mutation);
  void Garbage(Client& c);
  // Pump lets `s` write up to `frames` frames; the last one fails when
  // `fail_last`. Returns true when it did anything.
  bool Pump(SimStream& s, int frames, bool fail_last);
  void Lose(SimStream& s, absl::string_view why);
  void Reject(SimStream& s, const absl::Status& status);
  void Finish(SimStream& s, const absl::Status& status);
  void Join(Client& c, bool resume);
  void Reload(int world, int members);
  void Advance(absl::Duration by);
  void HeartbeatAll();

  // The cooperative end: every member finishes what it started.
  void Cooperate();
  bool UploadRest(SimStream& s);
  // DropDoneStreams forgets finished streams, as gRPC frees their reactors
  // (a round then sees their weak pointers expire).
  void DropDoneStreams();
  // HoldsNoBuffers: a finished round counts no buffered bytes (but see the
  // exception inside). CheckBuffers checks every round.
  static bool HoldsNoBuffers(const RoundRecord& record);
  void CheckBuffers();
  void CheckEverything();
  void CheckRound(const RoundKey& key, RoundRecord& record);
  void CheckCommit(const RoundKey& key, RoundRecord& record, int rank);

  Input& in_;
  absl::Time now_ = kStart;
  Outcomes outcomes_;
  GroupLimits limits_;
  std::unique_ptr<GroupState> group_;
  GroupConfig config_;
  std::vector<Client> clients_;
  std::map<uint64_t, int> epoch_world_;
  std::map<RoundKey, RoundRecord> rounds_;
};

void Simulation::Setup() {
  const int world = 1 + in_.Below(kMaxWorld);
  constexpr int64_t kBuffered[] = {int64_t{1} << 20, 1, 16, 64};
  constexpr int64_t kWindow[] = {int64_t{1} << 20, 0, 8, 64};
  constexpr absl::Duration kGrace[] = {absl::ZeroDuration(), absl::Seconds(5),
                                       absl::Seconds(1)};
  const int limits = in_.Byte();
  limits_.join_timeout = absl::Seconds(60);
  limits_.round_timeout = absl::Seconds(10 + 10 * (limits & 3));
  limits_.heartbeat_timeout = absl::Seconds(30);
  limits_.max_buffered_bytes_per_round = kBuffered[(limits >> 2) & 3];
  limits_.resume_window_bytes = kWindow[(limits >> 4) & 3];
  limits_.resume_grace = kGrace[((limits >> 6) & 3) % 3];
  limits_.max_chunk_bytes = 1 + in_.Below(16);
  limits_.events = &outcomes_;
  config_.name = kGroup;
  config_.world_size = world;
  const int quorum = in_.Byte();
  config_.min_quorum = (quorum & 0x80) ? quorum % (world + 1) : 0;
  config_.round_deadline = absl::Seconds(quorum & 0x40 ? 5 : 0);
  config_.digest =
      (quorum & 0x20) ? DigestAlgorithm::kSha256 : DigestAlgorithm::kBlake3;
  for (int i = 0; i < world; ++i) config_.members.push_back(Identity(i));
  group_ = std::make_unique<GroupState>(config_, limits_);
  for (int i = 0; i < kMaxWorld; ++i) {
    clients_.emplace_back();
    clients_.back().index = i;
  }
  for (int i = 0; i < world; ++i) Join(clients_[i], /*resume=*/false);
}

void Simulation::Settle(PendingCallbacks& callbacks) {
  callbacks.Run();
  TakeJoined();
}

void Simulation::TakeJoined() {
  for (Client& c : clients_) {
    if (c.session == nullptr) continue;
    for (; c.joined_seen < c.session->joined.size(); ++c.joined_seen) {
      const v1::Joined& joined = c.session->joined[c.joined_seen];
      epoch_world_[joined.epoch()] = static_cast<int>(joined.world_size());
      if (joined.epoch() != c.epoch) {
        c.epoch = joined.epoch();
        c.next_seq = 0;
        c.unfinished.reset();
      }
      c.rank = static_cast<int>(joined.rank());
    }
  }
}

void Simulation::Join(Client& c, bool resume) {
  c.session = std::make_shared<FakeSession>();
  c.joined_seen = 0;
  v1::JoinRequest request;
  request.set_group(kGroup);
  request.set_world_size(static_cast<uint32_t>(config_.world_size));
  if (resume) {
    request.set_resume_epoch(c.epoch);
    request.set_requested_rank(static_cast<uint32_t>(std::max(c.rank, 0)));
  } else if (c.index < config_.world_size) {
    request.set_requested_rank(static_cast<uint32_t>(c.index));
  }
  PendingCallbacks callbacks;
  group_->Join(Identity(c.index), "sim", request, c.session, now_, &callbacks)
      .IgnoreError();
  Settle(callbacks);
}

RoundRecord& Simulation::Record(uint64_t epoch, uint64_t seq) {
  auto [it, added] = rounds_.try_emplace({epoch, seq});
  RoundRecord& record = it->second;
  if (added) {
    auto world = epoch_world_.find(epoch);
    record.world = world == epoch_world_.end() ? 1 : world->second;
    record.plan = MakePlan(in_, record.world);
    record.ranks.resize(record.world);
  }
  return record;
}

void Simulation::Header(Client& c, bool resume, int mutation) {
  if (c.session == nullptr || c.rank < 0) return;
  v1::CollectiveHeader header;
  uint64_t seq;
  if (resume && c.unfinished.has_value()) {
    seq = *c.unfinished;
  } else if (resume) {
    seq = c.next_seq > 0 ? c.next_seq - 1 : 0;
  } else {
    seq = c.next_seq++;
    c.unfinished = seq;
  }
  RoundRecord& record = Record(c.epoch, seq);
  const int rank = c.rank < record.world ? c.rank : 0;
  const Plan& plan = record.plan;
  header.set_group(kGroup);
  header.set_epoch(c.epoch);
  header.set_seq(seq);
  header.set_op(plan.op);
  header.set_rank(static_cast<uint32_t>(c.rank));
  header.set_root(plan.root);
  header.set_reduce(plan.reduce);
  header.set_weight(plan.weight[rank]);
  FingerprintToProto(plan.fingerprint[rank], header.mutable_tensors());
  const RankRecord& mine = record.ranks[rank];
  if (resume) {
    header.set_resume(true);
    header.set_frames_received(mine.got.size());
    header.set_contribution_digest(DigestOf(config_.digest, mine.contribution));
  }
  switch (mutation) {
    case 1:
      header.set_op(static_cast<v1::Op>(in_.Below(7)));
      break;
    case 2:
      header.set_root(static_cast<uint32_t>(in_.Below(kMaxWorld + 1)));
      break;
    case 3:
      header.set_reduce(static_cast<v1::ReduceOp>(in_.Below(7)));
      break;
    case 4: {
      constexpr double kOdd[] = {0, -1, NAN, INFINITY, 7};
      header.set_weight(kOdd[in_.Below(5)]);
      break;
    }
    case 5:
      header.mutable_tensors(0)->set_dtype(
          static_cast<v1::DType>(in_.Below(12)));
      break;
    case 6:
      header.mutable_tensors(0)->add_shape(in_.Below(3) - 1);
      break;
    case 7:
      header.mutable_tensors(0)->set_name(in_.Below(2) ? "" : "b");
      break;
    case 8:
      header.set_epoch(c.epoch + 1 - in_.Below(3));
      break;
    case 9:
      header.set_rank(static_cast<uint32_t>(in_.Below(kMaxWorld + 1)));
      break;
    case 10:
      header.set_seq(seq + 1 - in_.Below(3));
      break;
    case 11:  // a client that lost some of the frames it had
      header.set_frames_received(in_.Below(
          static_cast<int>(std::min<size_t>(mine.got.size(), 200)) + 1));
      break;
    case 12:
      header.set_contribution_digest(in_.Bytes(in_.Below(2) ? 32 : 3, 0));
      break;
    default:
      break;
  }
  auto s = std::make_shared<SimStream>();
  c.streams.push_back(s);
  s->key = {header.epoch(), header.seq()};
  v1::CollectiveFrame frame;
  *frame.mutable_header() = header;
  grpc::ByteBuffer header_frame = EncodeFrame(frame);

  PendingCallbacks callbacks;
  absl::StatusOr<std::shared_ptr<Round>> found =
      group_->FindRound(Identity(c.index), header, now_, &callbacks);
  if (!found.ok()) {
    Finish(*s, found.status());
    Settle(callbacks);
    return;
  }
  // From here the header's epoch, seq and rank are the caller's own.
  RoundRecord& round_record = Record(header.epoch(), header.seq());
  round_record.round = *found;
  const std::string where = "header";
  absl::StatusOr<Fingerprint> fingerprint =
      FingerprintFromProto(header.tensors(), where);
  absl::Status valid = fingerprint.status();
  if (valid.ok() && header.op() != v1::ALL_GATHER &&
      header.op() != v1::ALL_GATHER_V && header.op() != v1::ALL_GATHER_BYTES &&
      header.op() != v1::BROADCAST && header.op() != v1::ALL_REDUCE) {
    valid = absl::UnimplementedError("op not supported");
  }
  if (valid.ok()) {
    valid = CheckFingerprintForOp(header.op(), *fingerprint, where);
  }
  if (!valid.ok()) {
    (*found)->Fail(valid, &callbacks);
    Finish(*s, valid);
    Settle(callbacks);
    return;
  }
  Fingerprint sent = *fingerprint;
  if (header.op() == v1::BROADCAST && header.root() != header.rank()) {
    sent.clear();
  }
  s->fingerprint = *std::move(fingerprint);
  s->upload = std::move(sent);
  s->sequence.emplace(s->upload, limits_.max_chunk_bytes);
  s->hasher.emplace((*found)->digest_algorithm());
  s->rank = static_cast<int>(header.rank());
  s->op = header.op();
  s->round = *found;
  AttachRequest request;
  request.rank = s->rank;
  request.peer = "sim";
  request.header = header;
  request.fingerprint = s->fingerprint;
  request.header_frame = header_frame;
  request.stream = s;
  request.upload_bytes = UploadBytes(s->rank, header, s->fingerprint);
  absl::Status attached;
  if (header.resume()) {
    absl::StatusOr<Round::ResumePoint> point =
        (*found)->Resume(std::move(request), &callbacks);
    if (point.ok()) {
      if (absl::Status skipped = s->sequence->SkipTo(point->upload_bytes);
          !skipped.ok()) {
        (*found)->Fail(absl::InternalError("resume point"), &callbacks);
        Finish(*s, absl::InternalError("resume point"));
        Settle(callbacks);
        return;
      }
      if (point->hasher.has_value()) s->hasher = std::move(point->hasher);
      s->ended = point->upload_ended;
    } else {
      attached = point.status();
    }
  } else {
    attached = (*found)->Attach(std::move(request), &callbacks);
  }
  if (!attached.ok()) {
    s->round = nullptr;
    Finish(*s, attached);
    Settle(callbacks);
    return;
  }
  RankRecord& rank_record = round_record.ranks[s->rank];
  rank_record.detached = false;
  if (!rank_record.attached) {
    rank_record.attached = true;
    rank_record.weight = header.weight();
    rank_record.upload = s->upload;
    rank_record.contribution = in_.Bytes(
        static_cast<size_t>(ContributionBytes(s->upload).value()), s->rank);
    if (round_record.op == v1::OP_UNSPECIFIED) {
      round_record.op = header.op();
      round_record.reduce = header.reduce();
      round_record.root = header.root();
      round_record.fingerprint = s->fingerprint;
      if (header.op() == v1::ALL_REDUCE) {
        for (const TensorSpec& spec : s->fingerprint) {
          round_record.arrivals.emplace_back(
              static_cast<size_t>(NumElements(spec.shape).value()));
        }
      }
    }
  }
  if (header.resume()) {
    // The client holds the frames it declared; the rest come again.
    std::vector<Got>& got = rank_record.got;
    if (header.frames_received() < got.size()) {
      got.resize(header.frames_received());
    }
  }
  Settle(callbacks);
}

// Where the next upload byte goes: the tensor and offset after `done` bytes
// of `upload`, skipping empty tensors.
std::pair<uint32_t, int64_t> Place(const Fingerprint& upload, int64_t done) {
  for (size_t t = 0; t < upload.size(); ++t) {
    const int64_t bytes = ByteSize(upload[t]).value();
    if (done < bytes) return {static_cast<uint32_t>(t), done};
    done -= bytes;
  }
  return {static_cast<uint32_t>(upload.size()), 0};
}

void Simulation::Chunk(Client& c, int size, int mutation) {
  std::shared_ptr<SimStream> s = c.Live();
  if (s == nullptr || s->round == nullptr || s->ended || !s->reading ||
      s->paused) {
    return;
  }
  RoundRecord& record = rounds_[s->key];
  const std::string& contribution = record.ranks[s->rank].contribution;
  const int64_t done = s->sequence->bytes_done();
  if (done == s->sequence->total_bytes() && mutation == 0) return;
  auto [tensor, offset] = Place(s->upload, done);
  int64_t in_tensor =
      tensor < s->upload.size() ? ByteSize(s->upload[tensor]).value() : 0;
  ChunkMeta meta;
  meta.rank = static_cast<uint32_t>(s->rank);
  meta.tensor_index = tensor;
  meta.offset = static_cast<uint64_t>(offset);
  meta.size = static_cast<uint64_t>(std::max<int64_t>(
      1, std::min({static_cast<int64_t>(size), in_tensor - offset,
                   limits_.max_chunk_bytes})));
  int64_t source = done;  // where the bytes come from in the contribution
  switch (mutation) {
    case 1:
      meta.offset += 1;
      break;
    case 2:
      meta.tensor_index += 1;
      meta.offset = 0;
      break;
    case 3:
      meta.size = 0;
      break;
    case 4:
      meta.size = static_cast<uint64_t>(limits_.max_chunk_bytes + 1);
      break;
    case 5:
      meta.rank = static_cast<uint32_t>(in_.Below(kMaxWorld + 1));
      break;
    case 6:  // the previous chunk again
      meta.offset -= std::min<uint64_t>(meta.offset, s->last_chunk);
      source -= std::min<int64_t>(source, s->last_chunk);
      break;
    default:
      break;
  }
  std::string data(meta.size, '\xAA');
  for (size_t i = 0; i < data.size(); ++i) {
    if (source + static_cast<int64_t>(i) <
        static_cast<int64_t>(contribution.size())) {
      data[i] = contribution[source + i];
    }
  }
  grpc::ByteBuffer frame = EncodeOwnedChunkFrame(meta, std::move(data));

  // UploadSink: the rank, the chunk's place, the hash.
  class UploadSink : public ChunkSink {
   public:
    explicit UploadSink(SimStream& s) : s_(s) {}
    absl::Status Begin(const ChunkMeta& meta) override {
      if (meta.rank != static_cast<uint32_t>(s_.rank)) {
        return absl::InvalidArgumentError("a chunk names another rank");
      }
      meta_ = meta;
      return s_.sequence->Accept(meta.tensor_index, meta.offset, meta.size);
    }
    void Data(const uint8_t* data, size_t size) override {
      s_.hasher->Update(data, size);
      bytes_.append(reinterpret_cast<const char*>(data), size);
    }
    SimStream& s_;
    ChunkMeta meta_;
    std::string bytes_;
  } sink(*s);
  v1::CollectiveFrame message;
  absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
      DecodeFrame(frame, &message, &sink);
  if (!kind.ok()) {
    Reject(*s, kind.status());
    return;
  }
  s->last_chunk = static_cast<int64_t>(sink.meta_.size);
  PendingCallbacks callbacks;
  group_->MemberAlive(s->key.first, s->rank, now_);
  bool more;
  if (s->op == v1::ALL_REDUCE) {
    if (!s->round->Finished() && !record.arrivals.empty()) {
      // The elements this chunk completes reach the round now.
      RankRecord& mine = record.ranks[s->rank];
      const int64_t element = static_cast<int64_t>(
          DTypeSize(record.fingerprint[sink.meta_.tensor_index].dtype));
      const int64_t start = static_cast<int64_t>(sink.meta_.offset);
      const int64_t end = start + static_cast<int64_t>(sink.meta_.size);
      auto& elements = record.arrivals[sink.meta_.tensor_index];
      for (int64_t e = start / element; e < end / element; ++e) {
        elements[static_cast<size_t>(e)].push_back(s->rank);
      }
      mine.reduce_bytes += end - start;
    }
    more = s->round->OfferReduceChunk(
        s->rank, frame, sink.meta_,
        reinterpret_cast<const uint8_t*>(sink.bytes_.data()), &callbacks);
  } else {
    more = s->round->OfferChunk(
        s->rank, frame, static_cast<int64_t>(sink.meta_.size), &callbacks);
  }
  if (!more) s->paused = true;
  Settle(callbacks);
}

void Simulation::End(Client& c, int mutation) {
  std::shared_ptr<SimStream> s = c.Live();
  if (s == nullptr || s->round == nullptr || !s->reading || s->paused) return;
  // A well-behaved member (mutation 0) ends once, after all its bytes.
  if (s->ended) {
    if (mutation != 0) {
      Reject(*s, absl::InvalidArgumentError("a frame arrived after the end"));
    }
    return;
  }
  if (absl::Status complete = s->sequence->CheckComplete(); !complete.ok()) {
    if (mutation != 0) Reject(*s, complete);
    return;
  }
  if (mutation == 1) {
    Reject(*s, absl::InvalidArgumentError("the end names another rank"));
    return;
  }
  const Digest actual = s->hasher->Finish();
  Digest claimed = actual;
  if (mutation == 2) claimed[in_.Below(32)] ^= 1 + in_.Below(255);
  if (mutation == 3) {
    Reject(*s, absl::InvalidArgumentError("the digest must hold 32 bytes"));
    return;
  }
  if (claimed != actual) {
    Reject(*s, absl::DataLossError("the declared digest does not match"));
    return;
  }
  s->ended = true;
  PendingCallbacks callbacks;
  s->round->EndContribution(s->rank, actual, &callbacks);
  Settle(callbacks);
}

void Simulation::Garbage(Client& c) {
  std::shared_ptr<SimStream> s = c.Live();
  if (s == nullptr || s->round == nullptr || !s->reading || s->paused) return;
  const std::string bytes = in_.Bytes(static_cast<size_t>(in_.Below(6)), 0);
  grpc::Slice slice(bytes.data(), bytes.size());
  grpc::ByteBuffer buffer(&slice, 1);
  v1::CollectiveFrame message;
  Collector sink;  // a chunk is validated like any other (Chunk does that)
  absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
      DecodeFrame(buffer, &message, s->ended ? nullptr : &sink);
  if (!kind.ok()) {
    Reject(*s, kind.status());
  } else if (s->ended) {
    Reject(*s, absl::InvalidArgumentError("a frame arrived after the end"));
  } else if (*kind == v1::CollectiveFrame::kHeader ||
             *kind == v1::CollectiveFrame::kCommit) {
    Reject(*s, absl::InvalidArgumentError("only chunks and the end may follow "
                                          "the header"));
  }
  // A well-formed chunk or end is what Chunk and End send, checked there.
}

void Simulation::Reject(SimStream& s, const absl::Status& status) {
  // RejectUpload: the round fails on every rank; the stream reads no more
  // and finishes when the round tells it to.
  s.reading = false;
  PendingCallbacks callbacks;
  s.round->Fail(
      absl::Status(status.code(), absl::StrCat(s.round->Describe(), ": rank ",
                                               s.rank, ": ", status.message())),
      &callbacks);
  Settle(callbacks);
}

void Simulation::Finish(SimStream& s, const absl::Status& status) {
  s.done = true;
  if (s.round != nullptr) {
    rounds_[s.key].ranks[s.rank].finishes.push_back(status);
  }
  s.round = nullptr;
}

void Simulation::Lose(SimStream& s, absl::string_view why) {
  if (s.done) return;
  s.done = true;
  if (s.round == nullptr) return;
  rounds_[s.key].ranks[s.rank].detached =
      limits_.resume_grace > absl::ZeroDuration() &&
      (s.round->Complete() || !s.round->Finished());
  PendingCallbacks callbacks;
  s.round->StreamLost(s.rank, why, now_, &callbacks, std::move(s.hasher));
  s.round = nullptr;
  for (Client& c : clients_) {
    if (c.epoch == s.key.first && c.rank == s.rank) c.unfinished = s.key.second;
  }
  Settle(callbacks);
}

bool Simulation::Pump(SimStream& s, int frames, bool fail_last) {
  bool did = false;
  for (int i = 0; i < frames && !s.done && s.round != nullptr; ++i) {
    Outgoing out;
    {
      PendingCallbacks next;
      out = s.round->NextOutgoing(s.rank, &next);
      Settle(next);
    }
    RankRecord& mine = rounds_[s.key].ranks[s.rank];
    switch (out.kind) {
      case Outgoing::Kind::kNothing:
        return did;
      case Outgoing::Kind::kFrame: {
        did = true;
        const bool ok = !(fail_last && i == frames - 1);
        if (ok) {
          Collector sink;
          v1::CollectiveFrame message;
          absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
              DecodeFrame(out.frame, &message, &sink);
          if (!kind.ok()) {
            Violation(absl::StrCat("the server sent an undecodable frame: ",
                                   kind.status().ToString()));
          }
          Got got;
          if (*kind == v1::CollectiveFrame::kHeader) {
            got.header = true;
            got.source = message.header().rank();
          } else if (*kind == v1::CollectiveFrame::kChunk) {
            got.source = sink.meta_.rank;
            got.tensor = sink.meta_.tensor_index;
            got.offset = sink.meta_.offset;
            got.data = std::move(sink.data_);
          } else {
            Violation(absl::StrCat("the server sent frame kind ", *kind,
                                   " before the commit"));
          }
          mine.got.push_back(std::move(got));
        }
        PendingCallbacks callbacks;
        s.round->WriteDone(s.rank, ok, &callbacks);
        Settle(callbacks);
        if (!ok) {
          Lose(s, "stopped receiving");
          return true;
        }
        break;
      }
      case Outgoing::Kind::kCommitAndFinish: {
        v1::CollectiveFrame message;
        absl::StatusOr<v1::CollectiveFrame::KindCase> kind =
            DecodeFrame(out.frame, &message, nullptr);
        if (!kind.ok() || *kind != v1::CollectiveFrame::kCommit) {
          Violation("the server's commit frame is not a commit");
        }
        mine.committed = true;
        mine.commit = message.commit();
        s.done = true;
        s.round = nullptr;
        for (Client& c : clients_) {
          if (c.epoch == s.key.first && c.rank == s.rank &&
              c.unfinished == s.key.second) {
            c.unfinished.reset();
          }
        }
        return true;
      }
      case Outgoing::Kind::kFinish:
        if (out.status.ok()) Violation("a stream was finished with OK");
        Finish(s, out.status);
        return true;
    }
  }
  return did;
}

void Simulation::Reload(int world, int members) {
  GroupConfig config = config_;
  config.world_size = world;
  config.members.clear();
  for (int i = 0; i < kMaxWorld; ++i) {
    if (members & (1 << i)) config.members.push_back(Identity(i));
  }
  config_ = config;
  PendingCallbacks callbacks;
  group_->Reconfigure(std::move(config), &callbacks);
  Settle(callbacks);
}

void Simulation::Advance(absl::Duration by) {
  now_ += by;
  PendingCallbacks callbacks;
  group_->CheckTimers(now_, &callbacks);
  Settle(callbacks);
}

void Simulation::HeartbeatAll() {
  for (Client& c : clients_) {
    if (c.session != nullptr) group_->Heartbeat(c.session.get(), now_);
  }
}

// Step: one byte picks the action and the member; the next ones its
// details.
void Simulation::Step() {
  const int action = in_.Byte();
  Client& c = clients_[(action >> 4) % kMaxWorld];
  switch (action & 0x0f) {
    case 0:
    case 1: {  // a header: new seq or resume, maybe mutated
      const int detail = in_.Byte();
      Header(c, (action & 0x0f) == 1, detail < 160 ? 0 : detail % 13);
      break;
    }
    case 2:
    case 3: {  // a chunk
      const int detail = in_.Byte();
      Chunk(c, 1 + (detail & 0x0f), detail >= 224 ? (detail >> 4) % 7 : 0);
      break;
    }
    case 4: {  // the end
      const int detail = in_.Byte();
      End(c, detail >= 192 ? detail % 4 : 0);
      break;
    }
    case 5:
    case 6: {  // the stream writes some frames
      const int detail = in_.Byte();
      for (const std::shared_ptr<SimStream>& s : c.streams) {
        if (!s->done) Pump(*s, 1 + (detail & 7), detail >= 240);
      }
      break;
    }
    case 7:  // the stream is cancelled
      if (std::shared_ptr<SimStream> s = c.Live()) Lose(*s, "was cancelled");
      break;
    case 8: {  // time passes
      constexpr absl::Duration kBy[] = {
          absl::Milliseconds(100), absl::Seconds(1),  absl::Seconds(3),
          absl::Seconds(6),        absl::Seconds(12), absl::Seconds(40)};
      Advance(kBy[in_.Below(6)]);
      break;
    }
    case 9:
      HeartbeatAll();
      break;
    case 10: {  // the session ends: broken, or the member leaves
      if (c.session == nullptr) break;
      PendingCallbacks callbacks;
      group_->SessionLost(c.session.get(), "broke", now_, &callbacks,
                          /*left=*/in_.Below(2) == 1);
      Settle(callbacks);
      break;
    }
    case 11:  // the member joins again, resuming its epoch or not
      Join(c, in_.Below(2) == 1);
      break;
    case 12: {  // a policy reload: world size and members
      const int world = 1 + in_.Below(kMaxWorld);
      int members = in_.Byte() & ((1 << kMaxWorld) - 1);
      if (__builtin_popcount(members) < world) members |= (1 << world) - 1;
      Reload(world, members);
      break;
    }
    case 13:
      Garbage(c);
      break;
    default:  // more chunks than anything else
      Chunk(c, 1 + in_.Below(16), 0);
      break;
  }
}

bool Simulation::UploadRest(SimStream& s) {
  if (s.done || s.round == nullptr || !s.reading || s.paused || s.ended) {
    return false;
  }
  for (Client& c : clients_) {
    if (c.Live().get() != &s) continue;
    const int64_t before = s.sequence->bytes_done();
    if (before < s.sequence->total_bytes()) {
      Chunk(c, static_cast<int>(limits_.max_chunk_bytes), 0);
      return s.sequence->bytes_done() != before;
    }
    End(c, 0);
    return true;
  }
  return false;
}

void Simulation::Cooperate() {
  HeartbeatAll();
  // Members join the rounds in flight they have not started.
  for (Client& c : clients_) {
    if (c.session == nullptr || c.rank < 0 || c.Live() != nullptr) continue;
    if (c.unfinished.has_value() &&
        limits_.resume_grace > absl::ZeroDuration()) {
      Header(c, /*resume=*/true, 0);
      continue;
    }
    auto it = rounds_.find({c.epoch, c.next_seq});
    if (it != rounds_.end() && it->second.round != nullptr &&
        !it->second.round->Finished()) {
      Header(c, /*resume=*/false, 0);
    }
  }
  for (int pass = 0; pass < 2000; ++pass) {
    bool progress = false;
    for (Client& c : clients_) {
      for (size_t i = 0; i < c.streams.size(); ++i) {
        std::shared_ptr<SimStream> s = c.streams[i];
        progress |= Pump(*s, 64, false);
        progress |= UploadRest(*s);
      }
    }
    if (!progress) return;
  }
}

void Simulation::Run() {
  Setup();
  for (int step = 0; step < kMaxSteps && !in_.empty(); ++step) {
    Step();
    DropDoneStreams();
  }
  Cooperate();
  DropDoneStreams();
  // Then time passes every deadline: first the resume grace (members that
  // broke off do not come back), then everything else.
  Advance(limits_.resume_grace + absl::Seconds(1));
  Cooperate();
  DropDoneStreams();
  CheckBuffers();
  Advance(absl::Hours(1));
  Advance(absl::Hours(1));
  for (Client& c : clients_) {
    for (const std::shared_ptr<SimStream>& s : c.streams)
      Pump(*s, 1 << 20, false);
  }
  CheckEverything();
}

void Simulation::DropDoneStreams() {
  for (Client& c : clients_) {
    c.streams.erase(std::remove_if(c.streams.begin(), c.streams.end(),
                                   [](const std::shared_ptr<SimStream>& s) {
                                     return s->done;
                                   }),
                    c.streams.end());
  }
}

bool Simulation::HoldsNoBuffers(const RoundRecord& record) {
  const std::shared_ptr<Round>& round = record.round;
  if (round == nullptr || !round->Finished() || round->BufferedBytes() == 0) {
    return true;
  }
  // A completed round the server let go of (its epoch ended, or newer
  // rounds pushed it out of those kept for resumes) before a detached
  // rank's grace passed keeps that rank's claims until it is freed; nobody
  // may resume it any more, so that is not a leak.
  const bool server_holds = round.use_count() > 1;
  return !server_holds &&
         std::any_of(record.ranks.begin(), record.ranks.end(),
                     [](const RankRecord& r) { return r.detached; });
}

void Simulation::CheckBuffers() {
  for (auto& [key, record] : rounds_) {
    const std::shared_ptr<Round>& round = record.round;
    if (!HoldsNoBuffers(record)) {
      Violation(absl::StrCat("epoch ", key.first, " seq ", key.second,
                             " finished but still counts ",
                             round->BufferedBytes(), " buffered bytes"));
    }
  }
}

void Simulation::CheckEverything() {
  for (Client& c : clients_) {
    for (const std::shared_ptr<SimStream>& s : c.streams) {
      if (!s->done) {
        Violation(absl::StrCat("rank ", s->rank, " of epoch ", s->key.first,
                               " seq ", s->key.second,
                               " is still waiting after every deadline"));
      }
    }
  }
  for (auto& [key, record] : rounds_) CheckRound(key, record);
}

void Simulation::CheckRound(const RoundKey& key, RoundRecord& record) {
  const std::string name =
      absl::StrCat("epoch ", key.first, " seq ", key.second);
  // FEDGATHER_FUZZ_VERBOSE=1 prints each round's outcome (to see what a
  // seed or a crashing input reaches).
  static const bool verbose = std::getenv("FEDGATHER_FUZZ_VERBOSE") != nullptr;
  if (verbose) {
    const std::vector<absl::Status>& reported = outcomes_.by_round[key];
    std::fprintf(
        stderr, "%s %s: %s\n", name.c_str(), OpName(record.op).c_str(),
        reported.empty() ? "no outcome" : reported[0].ToString().c_str());
  }
  if (const std::shared_ptr<Round>& round = record.round) {
    if (!round->Finished()) {
      Violation(absl::StrCat(name, " is unfinished after every deadline"));
    }
    if (!HoldsNoBuffers(record)) {
      Violation(absl::StrCat(name, " still counts ", round->BufferedBytes(),
                             " buffered bytes"));
    }
  }
  const std::vector<absl::Status>& outcomes = outcomes_.by_round[key];
  if (outcomes.size() > 1) {
    Violation(absl::StrCat(name, " reported ", outcomes.size(), " outcomes"));
  }
  bool committed = false;
  for (const RankRecord& rank : record.ranks) committed |= rank.committed;
  if (committed && (outcomes.empty() || !outcomes[0].ok())) {
    Violation(
        absl::StrCat(name, " committed but reported ",
                     outcomes.empty() ? "nothing" : outcomes[0].ToString()));
  }
  for (size_t r = 0; r < record.ranks.size(); ++r) {
    for (const absl::Status& finish : record.ranks[r].finishes) {
      if (committed) {
        Violation(absl::StrCat(name, " committed, but rank ", r, " was told ",
                               finish.ToString()));
      }
      if (outcomes.empty() || finish != outcomes[0]) {
        Violation(absl::StrCat(
            name, ": rank ", r, " was told ", finish.ToString(),
            " but the round ",
            outcomes.empty()
                ? "reported nothing"
                : absl::StrCat("failed with ", outcomes[0].ToString())));
      }
    }
  }
  for (size_t r = 0; r < record.ranks.size(); ++r) {
    if (record.ranks[r].committed)
      CheckCommit(key, record, static_cast<int>(r));
  }
}

void Simulation::CheckCommit(const RoundKey& key, RoundRecord& record,
                             int rank) {
  const std::string name = absl::StrCat("epoch ", key.first, " seq ",
                                        key.second, " rank ", rank, ": ");
  const RankRecord& mine = record.ranks[rank];
  const v1::Commit& commit = mine.commit;
  if (commit.group() != kGroup || commit.epoch() != key.first ||
      commit.seq() != key.second) {
    Violation(name + "the commit names another round");
  }
  if (commit.digest_algorithm() != DigestAlgorithmToProto(config_.digest)) {
    Violation(name + "the commit names another digest algorithm");
  }
  // The contributors: every rank that attached, in rank order.
  std::vector<int> contributors;
  for (int r = 0; r < record.world; ++r) {
    if (record.ranks[r].attached) contributors.push_back(r);
  }
  if (commit.contributions_size() != static_cast<int>(contributors.size())) {
    Violation(absl::StrCat(name, "the commit lists ",
                           commit.contributions_size(), " contributors, ",
                           contributors.size(), " attached"));
  }
  for (size_t i = 0; i < contributors.size(); ++i) {
    const v1::RankDigest& digest = commit.contributions(static_cast<int>(i));
    const RankRecord& from = record.ranks[contributors[i]];
    if (digest.rank() != static_cast<uint32_t>(contributors[i]) ||
        digest.digest() != DigestOf(config_.digest, from.contribution) ||
        digest.bytes() != from.contribution.size()) {
      Violation(absl::StrCat(
          name, "the commit's entry ", i, " (rank ", digest.rank(), ", ",
          digest.bytes(), " bytes) is not rank ", contributors[i],
          "'s contribution of ", from.contribution.size(), " bytes"));
    }
  }
  if (record.op == v1::ALL_REDUCE) {
    // Result chunks only, per tensor in order, contiguous from offset 0.
    std::vector<std::string> result(record.fingerprint.size());
    size_t tensor = 0;
    std::string all;
    for (const Got& got : mine.got) {
      if (got.header || got.source != static_cast<uint32_t>(record.world)) {
        Violation(name + "an ALL_REDUCE rank got a frame other than a result");
      }
      if (got.tensor < tensor || got.tensor >= result.size()) {
        Violation(absl::StrCat(name, "result chunk for tensor ", got.tensor,
                               " after tensor ", tensor));
      }
      tensor = got.tensor;
      const int64_t element =
          static_cast<int64_t>(DTypeSize(record.fingerprint[tensor].dtype));
      const int64_t limit =
          std::max(element, limits_.max_chunk_bytes / element * element);
      const int64_t size = static_cast<int64_t>(got.data.size());
      if (got.offset != result[tensor].size() || size == 0 ||
          size % element != 0 || size > limit) {
        Violation(absl::StrCat(name, "result chunk t", got.tensor, " @",
                               got.offset, " of ", got.data.size(),
                               " bytes is out of place"));
      }
      result[tensor] += got.data;
      all += got.data;
    }
    if (commit.result_digest() != DigestOf(config_.digest, all)) {
      Violation(name + "result_digest does not cover the result");
    }
    double weight_sum = 0;
    std::vector<double> weights(record.world, 1);
    for (int r : contributors) {
      weights[r] = record.ranks[r].weight;
      weight_sum += weights[r];
    }
    int64_t tensor_start = 0;
    for (size_t t = 0; t < record.fingerprint.size(); ++t) {
      const DType dtype = record.fingerprint[t].dtype;
      const size_t size = DTypeSize(dtype);
      const auto& elements = record.arrivals[t];
      if (result[t].size() != elements.size() * size) {
        Violation(absl::StrCat(name, "tensor ", t, " result has ",
                               result[t].size(), " bytes, not ",
                               elements.size() * size));
      }
      for (size_t e = 0; e < elements.size(); ++e) {
        std::vector<reduce_reference::Copy> copies;
        for (int r : elements[e]) {
          copies.push_back(
              {r, record.ranks[r].contribution.substr(
                      static_cast<size_t>(tensor_start) + e * size, size)});
        }
        if (copies.size() != contributors.size()) {
          Violation(absl::StrCat(name, "tensor ", t, " element ", e, " has ",
                                 copies.size(), " copies from ",
                                 contributors.size(), " contributors"));
        }
        const std::string expected = reduce_reference::Element(
            record.reduce, dtype, copies, weights,
            static_cast<int>(contributors.size()), weight_sum);
        const std::string actual = result[t].substr(e * size, size);
        if (!reduce_reference::SameElement(dtype, expected, actual)) {
          Violation(absl::StrCat(name, "tensor ", t, " element ", e,
                                 " differs from the reference (",
                                 ReduceOpName(record.reduce), " dtype ",
                                 DTypeName(dtype), ")"));
        }
      }
      tensor_start += static_cast<int64_t>(elements.size() * size);
    }
    return;
  }
  // The gathers and broadcast: each sender's bytes, whole and in order,
  // after its header; nothing from anyone else.
  std::vector<std::string> data(record.world);
  std::vector<bool> header_seen(record.world);
  for (const Got& got : mine.got) {
    if (got.source >= static_cast<uint32_t>(record.world) ||
        got.source == static_cast<uint32_t>(rank)) {
      Violation(absl::StrCat(name, "got a frame from rank ", got.source));
    }
    if (got.header) {
      header_seen[got.source] = true;
      continue;
    }
    if (!header_seen[got.source]) {
      Violation(absl::StrCat(name, "got rank ", got.source,
                             "'s chunk before its header"));
    }
    data[got.source] += got.data;
  }
  for (int r = 0; r < record.world; ++r) {
    const bool sends =
        r != rank && record.ranks[r].attached &&
        (record.op != v1::BROADCAST || r == static_cast<int>(record.root));
    const std::string expected = sends ? record.ranks[r].contribution : "";
    if (data[r] != expected) {
      Violation(absl::StrCat(name, "got ", data[r].size(), " bytes from rank ",
                             r, ", not its ", expected.size(),
                             "-byte contribution"));
    }
    if (sends && !header_seen[r]) {
      Violation(absl::StrCat(name, "never got rank ", r, "'s header"));
    }
  }
}

}  // namespace
}  // namespace fedgather::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fedgather::server::Input input(data, size);
  fedgather::server::Simulation(input).Run();
  return 0;
}
