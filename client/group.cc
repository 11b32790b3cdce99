#include "client/group.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "client/part_buffer.h"
#include "common/data_plane_name.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace fedgather {
namespace {

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

// How long a member of a direct candidate epoch waits for its two ring
// links, and then for the server's choice (which comes within 20 s of the
// epoch's forming: docs/protocol.md, "Data planes").
constexpr absl::Duration kRingConnectTimeout = absl::Seconds(10);
constexpr absl::Duration kDataPlaneWait = absl::Seconds(30);

CollectiveSetup Setup(v1::Op op) {
  CollectiveSetup setup;
  setup.op = op;
  return setup;
}

}  // namespace

Group::Group(std::shared_ptr<grpc::Channel> channel, std::string server,
             std::string name, absl::Duration resume_grace, Clock* clock)
    : session_(channel, std::move(server), std::move(name), resume_grace,
               clock),
      data_plane_(channel),
      clock_(clock) {}

Group::~Group() {
  // The listener's threads report refusals through the session: stop them
  // first. The ring's links are its own and stay.
  peer_offer_.reset();
  session_.BeginLeave();
  // The collectives still queued never start; refused now, before the
  // epoch's end could reach them as a session failure.
  const absl::Status left = absl::CancelledError(
      "this member left the group before the collective started");
  queue_.Shut(left);
  session_.Leave();
  // Leaving ends the epoch, which fails the collective that is running on
  // every rank; wait for it. ~Session then joins the session's thread.
  queue_.Close(left);
}

absl::Status Group::Join(const v1::JoinRequest& request, absl::Duration timeout,
                         absl::Duration connect_timeout,
                         std::unique_ptr<PeerOffer> offer,
                         const TlsFiles& tls) {
  FG_RETURN_IF_ERROR(session_.Join(request, timeout, connect_timeout));
  {
    absl::MutexLock lock(&plane_mu_);
    epoch_plane_reason_ = session_.data_plane_reason();
  }
  if (offer == nullptr) {
    if (session_.data_plane() == v1::DATA_PLANE_DIRECT) {
      return absl::FailedPreconditionError(absl::StrCat(
          "group '", session_.name(), "' epoch ", session_.epoch(),
          " formed on the direct data plane, but this member offered no "
          "peer endpoint"));
    }
    return absl::OkStatus();
  }
  PeerEpoch epoch{session_.name(), session_.epoch(), session_.rank(),
                  session_.identities(), session_.peer_crl()};
  // The listener's refusals go to the server's audit. ~Group stops the
  // listener before the session goes.
  PeerListenerOptions listening;
  listening.on_refusal = [this](const absl::Status& refusal) {
    session_.ReportPeerRefusal(refusal);
  };
  FG_RETURN_IF_ERROR(offer->Open(tls, epoch, std::move(listening)));
  peer_offer_ = std::move(offer);
  if (session_.data_plane() != v1::DATA_PLANE_DIRECT) return absl::OkStatus();
  // A direct candidate: every member dials its successor while it admits
  // its predecessor, and reports how that went; the server then chooses
  // the plane for every member alike.
  absl::StatusOr<PeerRing> ring = ConnectPeerRing(
      *peer_offer_, session_.name(), session_.epoch(), session_.rank(),
      session_.identities(), session_.peer_endpoints(),
      absl::Now() + kRingConnectTimeout);
  FG_RETURN_IF_ERROR(session_.ReportPeerLinks(ring.status()));
  FG_ASSIGN_OR_RETURN(const v1::DataPlaneChosen chosen,
                      session_.AwaitDataPlane(clock_->Now() + kDataPlaneWait));
  {
    absl::MutexLock lock(&plane_mu_);
    epoch_plane_reason_ = chosen.reason();
  }
  if (chosen.data_plane() != v1::DATA_PLANE_DIRECT) return absl::OkStatus();
  if (!ring.ok()) {
    return absl::InternalError(absl::StrCat(
        "the server chose the direct plane for group '", session_.name(),
        "' epoch ", session_.epoch(), " although rank ", session_.rank(),
        " reported that its ring links failed: ", ring.status().message()));
  }
  ring_ = std::make_unique<PeerRing>(*std::move(ring));
  DirectPlaneOptions direct;
  direct.max_chunk_bytes = session_.max_chunk_bytes();
  direct_plane_ =
      std::make_unique<DirectDataPlane>(&data_plane_, ring_.get(), direct);
  absl::MutexLock lock(&plane_mu_);
  epoch_plane_ = v1::DATA_PLANE_DIRECT;
  return absl::OkStatus();
}

v1::DataPlane Group::data_plane() const {
  absl::MutexLock lock(&plane_mu_);
  return epoch_plane_;
}

std::string Group::data_plane_reason() const {
  absl::MutexLock lock(&plane_mu_);
  return epoch_plane_reason_;
}

absl::Status Group::Run(CollectiveSetup setup,
                        absl::Span<const ConstHostTensor> inputs,
                        ReceiveTarget* target,
                        const CollectiveOptions& options) {
  setup.group = session_.name();
  setup.epoch = session_.epoch();
  setup.seq = next_seq_;
  setup.rank = session_.rank();
  setup.world_size = session_.world_size();
  setup.max_chunk_bytes = session_.max_chunk_bytes();
  setup.digest = session_.digest_algorithm();
  setup.upload_chunk_bytes = options.upload_chunk_bytes;
  setup.resume_grace = options.resume_grace;
  setup.break_after_bytes_sent = options.break_after_bytes_sent;
  setup.break_after_frames_received = options.break_after_frames_received;
  setup.progress = options.progress;
  setup.liveness = session_.liveness();
  setup.clock = clock_;
  DataPlane* plane = &data_plane_;
  const v1::DataPlane epoch_plane = data_plane();
  if (epoch_plane == v1::DATA_PLANE_DIRECT) {
    setup.data_plane = v1::DATA_PLANE_DIRECT;
    direct_plane_->set_forward_hook(options.direct_forward_hook);
    plane = direct_plane_.get();
  }
  CollectiveCall call(setup, inputs, target);
  // Bad local input is reported as such, even when the group has ended.
  FG_RETURN_IF_ERROR(call.Prepare());
  FG_RETURN_IF_ERROR(session_.Check());
  call.Start(plane);
  // The header is on its way: this seq is spent whatever the outcome.
  ++next_seq_;
  const absl::Status status = call.Wait(options.timeout);
  if (!status.ok() && epoch_plane == v1::DATA_PLANE_DIRECT) {
    // The server falls back too when a round of a direct epoch fails
    // (docs/protocol.md, "Data planes"); a ring link may be broken.
    absl::MutexLock lock(&plane_mu_);
    epoch_plane_ = v1::DATA_PLANE_RELAY;
    epoch_plane_reason_ =
        absl::StrCat("fell back to the relay after seq ", setup.seq,
                     " failed: ", status.message());
  }
  // A call that failed on a silent server ends the session too.
  if (!status.ok()) session_.Check().IgnoreError();
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
    expected.shape.insert(expected.shape.begin(), world_size());
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
        std::vector<PartBuffer> parts(world_size());
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
