#include "client/group.h"

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/part_buffer.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace fedgather {
namespace {

// IsTlsTrustFailure tells a TLS handshake that failed on the peer's
// certificate (a wrong CA, a server name the certificate does not hold): a
// configuration error, not a server that is still starting. gRPC reports it
// only as text, OpenSSL's reason or its own peer-name check.
bool IsTlsTrustFailure(const absl::Status& status) {
  return absl::StrContains(status.message(), "certificate verify failed") ||
         absl::StrContains(status.message(), "is not in peer certificate");
}

// Places rank r's part of tensor i at r * bytes within outputs[i].
class StackedTarget : public ReceiveTarget {
 public:
  StackedTarget(absl::Span<const MutableHostTensor> outputs,
                std::vector<int64_t> part_bytes)
      : outputs_(outputs), part_bytes_(std::move(part_bytes)) {}

  absl::StatusOr<uint8_t*> Place(int rank, int index,
                                 const TensorSpec& spec) override {
    return static_cast<uint8_t*>(outputs_[index].data) +
           rank * part_bytes_[index];
  }

 private:
  absl::Span<const MutableHostTensor> outputs_;
  std::vector<int64_t> part_bytes_;
};

// Places each part in memory from a caller's allocator.
class AllocatedTarget : public ReceiveTarget {
 public:
  explicit AllocatedTarget(const Group::PartAllocator& allocate)
      : allocate_(allocate) {}

  absl::StatusOr<uint8_t*> Place(int rank, int index,
                                 const TensorSpec& spec) override {
    FG_ASSIGN_OR_RETURN(void* memory, allocate_(rank, index, spec));
    return static_cast<uint8_t*>(memory);
  }

 private:
  const Group::PartAllocator& allocate_;
};

// Places the one part a rank receives in the caller's tensors: the root's
// for a BROADCAST (this rank's own part is the same memory), the result for
// an ALL_REDUCE.
class BroadcastTarget : public ReceiveTarget {
 public:
  explicit BroadcastTarget(absl::Span<const MutableHostTensor> tensors)
      : tensors_(tensors) {}

  absl::StatusOr<uint8_t*> Place(int rank, int index,
                                 const TensorSpec& spec) override {
    return static_cast<uint8_t*>(tensors_[index].data);
  }

 private:
  absl::Span<const MutableHostTensor> tensors_;
};

CollectiveSetup Setup(v1::Op op) {
  CollectiveSetup setup;
  setup.op = op;
  return setup;
}

}  // namespace

Group::Group(std::shared_ptr<grpc::Channel> channel, std::string server,
             std::string name, absl::Duration resume_grace)
    : stub_(v1::Rendezvous::NewStub(channel)),
      generic_stub_(channel),
      name_(std::move(name)),
      liveness_(std::move(server), name_),
      resume_grace_(resume_grace) {}

Group::~Group() {
  {
    absl::MutexLock lock(&mu_);
    leaving_ = true;
  }
  // The collectives still queued never start; refused now, before the
  // epoch's end could reach them as a session failure.
  const absl::Status left = absl::CancelledError(
      "this member left the group before the collective started");
  queue_.Shut(left);
  {
    // Say so, so that the server ends the epoch at once rather than wait
    // for this member to resume (best effort: the stream may be broken).
    // A server found silent is not told: the write could wait on it.
    bool said = false;
    if (CheckServer().ok()) {
      absl::MutexLock lock(&write_mu_);
      v1::SessionRequest leave;
      leave.mutable_leave();
      said = session_ != nullptr && session_->Write(leave);
    }
    // A cancel could overtake the message on the wire: give the server a
    // moment to end the session on it first.
    if (said) session_over_.WaitForNotificationWithTimeout(absl::Seconds(2));
  }
  {
    absl::MutexLock lock(&mu_);
    if (session_context_ != nullptr) session_context_->TryCancel();
  }
  leave_.Notify();
  // Leaving ends the epoch, which fails the collective that is running on
  // every rank; wait for it.
  queue_.Close(left);
  if (session_thread_.joinable()) session_thread_.join();
}

absl::StatusOr<v1::Joined> Group::OpenSession(const v1::JoinRequest& request,
                                              absl::Duration timeout,
                                              bool* server_final) {
  *server_final = false;
  grpc::ClientContext* context;
  {
    absl::MutexLock write_lock(&write_mu_);
    session_.reset();  // the old stream goes before its context
    {
      absl::MutexLock lock(&mu_);
      if (leaving_) return absl::CancelledError("this member left the group");
      session_context_ = std::make_unique<grpc::ClientContext>();
      context = session_context_.get();
    }
    session_ = stub_->Session(context);
  }
  absl::Notification answered;
  bool timed_out = false;
  std::thread watchdog([&] {
    if (!answered.WaitForNotificationWithTimeout(timeout)) {
      timed_out = true;
      context->TryCancel();
    }
  });
  v1::SessionRequest join;
  *join.mutable_join() = request;
  v1::SessionEvent event;
  bool written;
  {
    absl::MutexLock write_lock(&write_mu_);
    written = session_->Write(join);
  }
  const bool got = written && session_->Read(&event);
  answered.Notify();
  watchdog.join();
  if (got && event.kind_case() == v1::SessionEvent::kJoined) {
    return event.joined();
  }
  const grpc::Status status = session_->Finish();
  *server_final =
      context->GetServerTrailingMetadata().count(kFinalStatusKey) > 0;
  if (timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat("the group did not form within the client timeout of ",
                     absl::FormatDuration(timeout)));
  }
  if (status.ok()) {
    return absl::InternalError("protocol error: the session ended at once");
  }
  return FromGrpcStatus(status);
}

absl::Status Group::Join(const v1::JoinRequest& request, absl::Duration timeout,
                         absl::Duration connect_timeout) {
  const absl::Time start = absl::Now();
  const absl::Time give_up = start + timeout;
  const absl::Time stop_connecting = start + std::min(connect_timeout, timeout);
  absl::Duration backoff = absl::Milliseconds(50);
  absl::StatusOr<v1::Joined> joined;
  for (int attempt = 1;; ++attempt) {
    bool server_final = false;
    joined = OpenSession(request,
                         std::max(give_up - absl::Now(), absl::Milliseconds(1)),
                         &server_final);
    // Only a broken stream is tried again: the server did not answer it,
    // and the TLS handshake did not refuse the server's certificate.
    if (joined.ok() || server_final || !absl::IsUnavailable(joined.status()) ||
        IsTlsTrustFailure(joined.status())) {
      break;
    }
    if (absl::Now() + backoff >= stop_connecting) {
      if (attempt == 1) break;
      return absl::UnavailableError(
          absl::StrCat("could not reach the server within ",
                       absl::FormatDuration(absl::Trunc(
                           absl::Now() - start, absl::Milliseconds(100))),
                       " (", attempt,
                       " tries); the last error: ", joined.status().message()));
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
  if (!joined.ok()) return joined.status();
  rank_ = static_cast<int>(joined->rank());
  world_size_ = static_cast<int>(joined->world_size());
  epoch_ = joined->epoch();
  max_chunk_bytes_ = joined->max_chunk_bytes();
  heartbeat_interval_ = absl::Milliseconds(joined->heartbeat_interval_ms());
  heartbeat_timeout_ = absl::Milliseconds(joined->heartbeat_timeout_ms());
  for (const v1::Member& member : joined->members()) {
    identities_.push_back(member.identity());
  }
  StartHeartbeats();
  session_thread_ = std::thread([this] {
    RunSession();
    session_over_.Notify();
  });
  return absl::OkStatus();
}

void Group::StartHeartbeats() {
  // The Joined just arrived: the server is heard from as of now.
  liveness_.Watch(heartbeat_timeout_, heartbeat_interval_, absl::Now());
  stop_heartbeats_ = std::make_unique<absl::Notification>();
  heartbeat_thread_ = std::thread([this, stop = stop_heartbeats_.get()] {
    v1::SessionRequest heartbeat;
    heartbeat.mutable_heartbeat();
    while (!stop->WaitForNotificationWithTimeout(heartbeat_interval_)) {
      absl::MutexLock write_lock(&write_mu_);
      if (!session_->Write(heartbeat)) {
        // The stream is broken even if it still reads: end it, so that
        // RunSession resumes it before the server misses our heartbeats.
        absl::MutexLock lock(&mu_);
        session_context_->TryCancel();
        break;
      }
    }
  });
}

void Group::StopHeartbeats() {
  stop_heartbeats_->Notify();
  heartbeat_thread_.join();
}

void Group::RunSession() {
  for (;;) {
    v1::SessionEvent event;
    // The server answers each heartbeat; every event shows it is alive.
    while (session_->Read(&event)) liveness_.Heard(absl::Now());
    liveness_.Pause();  // a broken session is resumed within its grace
    StopHeartbeats();
    const grpc::Status status = session_->Finish();
    bool final;
    {
      absl::MutexLock lock(&mu_);
      final = session_context_->GetServerTrailingMetadata().count(
                  kFinalStatusKey) > 0;
      // CheckServer found the server silent and ended the session.
      if (!session_status_.ok()) return;
      if (leaving_) {
        session_status_ = absl::CancelledError("this member left the group");
        return;
      }
    }
    absl::Status ended =
        status.ok() ? absl::UnavailableError("the server closed the session")
                    : FromGrpcStatus(status);
    // A session the server ended is over; a broken one is resumed.
    if (!final && resume_grace_ > absl::ZeroDuration()) {
      ended = ResumeSession(ended.message());
      if (ended.ok()) continue;
    }
    absl::MutexLock lock(&mu_);
    session_status_ =
        leaving_ ? absl::CancelledError("this member left the group") : ended;
    return;
  }
}

absl::Status Group::CheckServer() {
  absl::Status silent = liveness_.Check(absl::Now());
  if (silent.ok()) return silent;
  absl::MutexLock lock(&mu_);
  if (session_status_.ok()) {
    session_status_ = silent;
    // The session thread sees its stream end, and does not resume it.
    if (session_context_ != nullptr) session_context_->TryCancel();
  }
  return silent;
}

absl::Status Group::ResumeSession(absl::string_view why) {
  v1::JoinRequest request;
  request.set_group(name_);
  request.set_world_size(static_cast<uint32_t>(world_size_));
  request.set_requested_rank(static_cast<uint32_t>(rank_));
  request.set_resume_epoch(epoch_);
  const absl::Time give_up = absl::Now() + resume_grace_;
  absl::Duration backoff = absl::Milliseconds(50);
  absl::Status last;
  while (absl::Now() < give_up) {
    bool server_final = false;
    absl::StatusOr<v1::Joined> joined = OpenSession(
        request, std::max(give_up - absl::Now(), absl::Milliseconds(1)),
        &server_final);
    if (joined.ok()) {
      if (joined->epoch() != epoch_ ||
          joined->rank() != static_cast<uint32_t>(rank_)) {
        return absl::InternalError("protocol error: resumed another epoch");
      }
      StartHeartbeats();
      return absl::OkStatus();
    }
    last = joined.status();
    if (server_final || absl::IsCancelled(last)) return last;
    if (leave_.WaitForNotificationWithTimeout(backoff)) break;
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
  return absl::UnavailableError(absl::StrCat(
      "the session to the server broke (", why,
      ") and could not be resumed within ", absl::FormatDuration(resume_grace_),
      last.ok() ? "" : absl::StrCat(": ", last.message())));
}

absl::Status Group::Run(CollectiveSetup setup,
                        absl::Span<const ConstHostTensor> inputs,
                        ReceiveTarget* target,
                        const CollectiveOptions& options) {
  setup.group = name_;
  setup.epoch = epoch_;
  setup.seq = next_seq_;
  setup.rank = rank_;
  setup.world_size = world_size_;
  setup.max_chunk_bytes = max_chunk_bytes_;
  setup.upload_chunk_bytes = options.upload_chunk_bytes;
  setup.resume_grace = options.resume_grace;
  setup.break_after_bytes_sent = options.break_after_bytes_sent;
  setup.break_after_frames_received = options.break_after_frames_received;
  setup.progress = options.progress;
  setup.liveness = &liveness_;
  CollectiveCall call(setup, inputs, target);
  // Bad local input is reported as such, even when the group has ended.
  FG_RETURN_IF_ERROR(call.Prepare());
  FG_RETURN_IF_ERROR(CheckServer());
  {
    absl::MutexLock lock(&mu_);
    if (!session_status_.ok()) return session_status_;
  }
  call.Start(&generic_stub_);
  // The header is on its way: this seq is spent whatever the outcome.
  ++next_seq_;
  const absl::Status status = call.Wait(options.timeout);
  // A call that failed on a silent server ends the session too.
  if (!status.ok()) CheckServer().IgnoreError();
  if (options.stats != nullptr) *options.stats = call.stats();
  FG_RETURN_IF_ERROR(status);
  if (options.contributors != nullptr) {
    *options.contributors = call.contributors();
  }
  return absl::OkStatus();
}

absl::Status Group::RunAllGatherInto(
    absl::Span<const ConstHostTensor> inputs,
    absl::Span<const MutableHostTensor> outputs,
    const CollectiveOptions& options) {
  if (inputs.size() != outputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        inputs.size(), " inputs but ", outputs.size(), " outputs"));
  }
  std::vector<int64_t> part_bytes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec& in = inputs[i].spec;
    TensorSpec expected = in;
    expected.shape.insert(expected.shape.begin(), world_size_);
    if (outputs[i].spec != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("output ", i, " is ", SpecToString(outputs[i].spec),
                       " but must be ", SpecToString(expected)));
    }
    FG_ASSIGN_OR_RETURN(const int64_t bytes, ByteSize(in));
    if (bytes > 0 && outputs[i].data == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("output '", in.name, "' has no memory"));
    }
    part_bytes.push_back(bytes);
  }
  StackedTarget target(outputs, std::move(part_bytes));
  return Run(Setup(v1::ALL_GATHER), inputs, &target, options);
}

absl::Status Group::RunAllGatherV(absl::Span<const ConstHostTensor> inputs,
                                  const PartAllocator& allocate,
                                  const CollectiveOptions& options, v1::Op op) {
  AllocatedTarget target(allocate);
  return Run(Setup(op), inputs, &target, options);
}

absl::Status Group::RunBroadcast(absl::Span<const MutableHostTensor> tensors,
                                 int root, const CollectiveOptions& options) {
  std::vector<ConstHostTensor> inputs;
  for (const MutableHostTensor& t : tensors) {
    FG_ASSIGN_OR_RETURN(const int64_t bytes, ByteSize(t.spec));
    if (bytes > 0 && t.data == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.spec.name, "' has no memory"));
    }
    inputs.push_back({t.spec, t.data});
  }
  BroadcastTarget target(tensors);
  CollectiveSetup setup = Setup(v1::BROADCAST);
  setup.root = root;
  return Run(setup, inputs, &target, options);
}

absl::Status Group::RunAllReduce(absl::Span<const ConstHostTensor> inputs,
                                 absl::Span<const MutableHostTensor> outputs,
                                 v1::ReduceOp op, double weight,
                                 const CollectiveOptions& options) {
  if (inputs.size() != outputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        inputs.size(), " inputs but ", outputs.size(), " outputs"));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (outputs[i].spec != inputs[i].spec) {
      return absl::InvalidArgumentError(
          absl::StrCat("output ", i, " is ", SpecToString(outputs[i].spec),
                       " but must be ", SpecToString(inputs[i].spec)));
    }
    FG_ASSIGN_OR_RETURN(const int64_t bytes, ByteSize(inputs[i].spec));
    if (bytes > 0 && outputs[i].data == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("output '", inputs[i].spec.name, "' has no memory"));
    }
  }
  if (op == v1::WEIGHTED_MEAN && !(weight > 0 && std::isfinite(weight))) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight ", weight, " must be a positive example count"));
  }
  // Outputs may alias inputs: every input byte is sent before the result,
  // which needs every rank's bytes, can arrive.
  BroadcastTarget target(outputs);
  CollectiveSetup setup = Setup(v1::ALL_REDUCE);
  setup.reduce = op;
  setup.weight = weight;
  return Run(setup, inputs, &target, options);
}

// The queued forms. Each copies the descriptors it was given (the spans
// may be temporaries); the memory they point to is the caller's.

Work<> Group::AllGatherIntoAsync(absl::Span<const ConstHostTensor> inputs,
                                 absl::Span<const MutableHostTensor> outputs,
                                 const CollectiveOptions& options) {
  return Enqueue<NoResult>(
      [this, in = std::vector<ConstHostTensor>(inputs.begin(), inputs.end()),
       out = std::vector<MutableHostTensor>(outputs.begin(), outputs.end()),
       options]() -> absl::StatusOr<NoResult> {
        FG_RETURN_IF_ERROR(RunAllGatherInto(in, out, options));
        return NoResult{};
      });
}

absl::Status Group::AllGatherInto(absl::Span<const ConstHostTensor> inputs,
                                  absl::Span<const MutableHostTensor> outputs,
                                  const CollectiveOptions& options) {
  return AllGatherIntoAsync(inputs, outputs, options).Wait();
}

Work<> Group::AllGatherVAsync(absl::Span<const ConstHostTensor> inputs,
                              PartAllocator allocate,
                              const CollectiveOptions& options) {
  return Enqueue<NoResult>(
      [this, in = std::vector<ConstHostTensor>(inputs.begin(), inputs.end()),
       allocate = std::move(allocate), options]() -> absl::StatusOr<NoResult> {
        FG_RETURN_IF_ERROR(RunAllGatherV(in, allocate, options));
        return NoResult{};
      });
}

absl::Status Group::AllGatherV(absl::Span<const ConstHostTensor> inputs,
                               const PartAllocator& allocate,
                               const CollectiveOptions& options) {
  return AllGatherVAsync(inputs, allocate, options).Wait();
}

Work<std::vector<std::string>> Group::AllGatherBytesAsync(
    std::string bytes, const CollectiveOptions& options) {
  return Enqueue<std::vector<std::string>>(
      [this, bytes = std::move(bytes),
       options]() -> absl::StatusOr<std::vector<std::string>> {
        std::vector<PartBuffer> parts(world_size_);
        const ConstHostTensor input{
            {"bytes", DType::kU8, {static_cast<int64_t>(bytes.size())}},
            bytes.data()};
        FG_RETURN_IF_ERROR(RunAllGatherV(
            {&input, 1},
            [&](int rank, int,
                const TensorSpec& spec) -> absl::StatusOr<void*> {
              return parts[rank].Allocate(static_cast<size_t>(spec.shape[0]));
            },
            options, v1::ALL_GATHER_BYTES));
        std::vector<std::string> gathered;
        for (const PartBuffer& part : parts) {
          gathered.emplace_back(reinterpret_cast<const char*>(part.data()),
                                part.size());
        }
        return gathered;
      });
}

absl::StatusOr<std::vector<std::string>> Group::AllGatherBytes(
    absl::string_view bytes, const CollectiveOptions& options) {
  return AllGatherBytesAsync(std::string(bytes), options).Get();
}

Work<> Group::BroadcastAsync(absl::Span<const MutableHostTensor> tensors,
                             int root, const CollectiveOptions& options) {
  return Enqueue<NoResult>(
      [this, t = std::vector<MutableHostTensor>(tensors.begin(), tensors.end()),
       root, options]() -> absl::StatusOr<NoResult> {
        FG_RETURN_IF_ERROR(RunBroadcast(t, root, options));
        return NoResult{};
      });
}

absl::Status Group::Broadcast(absl::Span<const MutableHostTensor> tensors,
                              int root, const CollectiveOptions& options) {
  return BroadcastAsync(tensors, root, options).Wait();
}

Work<> Group::AllReduceAsync(absl::Span<const ConstHostTensor> inputs,
                             absl::Span<const MutableHostTensor> outputs,
                             v1::ReduceOp op, double weight,
                             const CollectiveOptions& options) {
  return Enqueue<NoResult>(
      [this, in = std::vector<ConstHostTensor>(inputs.begin(), inputs.end()),
       out = std::vector<MutableHostTensor>(outputs.begin(), outputs.end()), op,
       weight, options]() -> absl::StatusOr<NoResult> {
        FG_RETURN_IF_ERROR(RunAllReduce(in, out, op, weight, options));
        return NoResult{};
      });
}

absl::Status Group::AllReduce(absl::Span<const ConstHostTensor> inputs,
                              absl::Span<const MutableHostTensor> outputs,
                              v1::ReduceOp op, double weight,
                              const CollectiveOptions& options) {
  return AllReduceAsync(inputs, outputs, op, weight, options).Wait();
}

}  // namespace fedgather
