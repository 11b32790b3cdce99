#include "python/src/process_group.h"

#include <ATen/ATen.h>

#include <exception>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/group.h"
#include "client/torch/torch_dtype.h"
#include "client/work.h"
#include "common/tensor_spec.h"
#include "python/src/error.h"
#include "python/src/gil.h"

namespace fedgather::python {
namespace {

// DTypeOf is fedgather::DTypeOf, throwing (on this rank) for a dtype
// fedgather does not carry.
DType DTypeOf(const at::Tensor& tensor) {
  absl::StatusOr<DType> dtype = fedgather::DTypeOf(tensor);
  TORCH_CHECK(dtype.ok(), "fedgather: ", dtype.status().message());
  return *dtype;
}

// CheckTensor throws (on this rank) unless `tensor` is a CPU tensor and,
// when it is written in place, contiguous.
void CheckTensor(const at::Tensor& tensor, const char* what, bool in_place) {
  TORCH_CHECK(tensor.defined(), "fedgather: ", what, " is undefined");
  TORCH_CHECK(tensor.device().is_cpu(), "fedgather: ", what,
              " must be a CPU tensor, not on ", tensor.device());
  TORCH_CHECK(!in_place || tensor.is_contiguous(), "fedgather: ", what,
              " must be contiguous (it is written in place)");
  DTypeOf(tensor);
}

TensorSpec SpecOf(std::string name, const at::Tensor& tensor) {
  TensorSpec spec;
  spec.name = std::move(name);
  spec.dtype = DTypeOf(tensor);
  spec.shape.assign(tensor.sizes().begin(), tensor.sizes().end());
  return spec;
}

// Tensors travel under their index in the call: "0", "1", ...
std::string NameOf(size_t index) { return std::to_string(index); }

std::vector<int64_t> Stacked(int64_t world, at::IntArrayRef shape) {
  std::vector<int64_t> out{world};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

v1::ReduceOp WireOp(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return v1::SUM;
    case c10d::ReduceOp::AVG:
      return v1::MEAN;
    case c10d::ReduceOp::MIN:
      return v1::MIN;
    case c10d::ReduceOp::MAX:
      return v1::MAX;
    default:
      TORCH_CHECK(false,
                  "fedgather: all_reduce supports SUM, AVG, MIN and MAX, not "
                  "ReduceOp ",
                  static_cast<int>(op.op_));
  }
}

template <typename T>
std::function<absl::Status()> Waiter(Work<T> work) {
  return [work = std::move(work)] { return work.Wait(); };
}

}  // namespace

WorkFedgather::WorkFedgather(int rank, c10d::OpType op,
                             std::vector<at::Tensor> outputs)
    : c10d::Work(rank, op),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))) {}

void WorkFedgather::Complete(const absl::Status& status,
                             const std::string& context) {
  if (status.ok()) {
    future_->markCompleted(c10::IValue(outputs_));
    finish();
    return;
  }
  std::exception_ptr error =
      std::make_exception_ptr(StatusError(context, status));
  future_->setError(error);
  finish(error);
}

ProcessGroupFedgather::ProcessGroupFedgather(std::shared_ptr<Session> session,
                                             std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(session->group().rank(),
                         session->group().world_size()),
      session_(std::move(session)),
      timeout_(timeout) {
  completion_thread_ = std::thread([this] { CompletionLoop(); });
}

ProcessGroupFedgather::~ProcessGroupFedgather() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  // The completion thread takes the GIL to destroy a pending collective's
  // tensors whose PyObjects they own, and to run Python Future callbacks.
  WithoutGil([this] { completion_thread_.join(); });
}

std::string ProcessGroupFedgather::Context(const char* op) const {
  return absl::StrCat("fedgather ", op, " (group ", session_->group().name(),
                      ", rank ", getRank(), ")");
}

absl::Duration ProcessGroupFedgather::TimeoutOf(
    std::chrono::milliseconds requested) const {
  if (requested == c10d::kUnsetTimeout) requested = timeout_;
  return absl::Milliseconds(requested.count());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFedgather::Track(Pending pending) {
  c10::intrusive_ptr<c10d::Work> work = pending.work;
  absl::MutexLock lock(&mu_);
  pending_.push_back(std::move(pending));
  return work;
}

void ProcessGroupFedgather::CompletionLoop() {
  for (;;) {
    Pending pending;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ProcessGroupFedgather* self)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
                 return !self->pending_.empty() || self->stopping_;
               },
          this));
      if (pending_.empty()) return;  // stopping, and nothing in flight
      pending = std::move(pending_.front());
      pending_.pop_front();
    }
    // Works of one Group complete in the order they were started, so
    // waiting in order never waits longer than needed.
    absl::Status status = pending.wait();
    if (status.ok() && pending.finish) {
      try {
        pending.finish();
      } catch (const std::exception& e) {
        status = absl::InternalError(
            absl::StrCat("copying the result out failed: ", e.what()));
      }
    }
    pending.work->Complete(status, pending.context);
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFedgather::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "fedgather: broadcast needs a tensor");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < getSize(),
              "fedgather: broadcast root ", opts.rootRank,
              " is not a rank of this group of ", getSize());
  TORCH_CHECK(opts.rootTensor == 0,
              "fedgather: broadcast supports rootTensor 0 only");
  std::vector<MutableHostTensor> views;
  for (size_t i = 0; i < tensors.size(); ++i) {
    CheckTensor(tensors[i], "the broadcast tensor", /*in_place=*/true);
    views.push_back({SpecOf(NameOf(i), tensors[i]), tensors[i].data_ptr()});
  }
  CollectiveOptions options;
  options.timeout = TimeoutOf(opts.timeout);
  Work<> work = session_->group().BroadcastAsync(
      views, static_cast<int>(opts.rootRank), options);
  return Track({Waiter(std::move(work)), nullptr,
                c10::make_intrusive<WorkFedgather>(
                    getRank(), c10d::OpType::BROADCAST, tensors),
                Context("broadcast")});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFedgather::AllReduce(
    std::vector<at::Tensor>& tensors, const c10d::ReduceOp& op,
    std::chrono::milliseconds timeout, c10d::OpType type) {
  TORCH_CHECK(!tensors.empty(), "fedgather: all_reduce needs a tensor");
  const v1::ReduceOp wire_op = WireOp(op);
  std::vector<ConstHostTensor> inputs;
  std::vector<MutableHostTensor> outputs;
  for (size_t i = 0; i < tensors.size(); ++i) {
    CheckTensor(tensors[i], "the all_reduce tensor", /*in_place=*/true);
    TensorSpec spec = SpecOf(NameOf(i), tensors[i]);
    inputs.push_back({spec, tensors[i].data_ptr()});
    outputs.push_back({std::move(spec), tensors[i].data_ptr()});  // in place
  }
  CollectiveOptions options;
  options.timeout = TimeoutOf(timeout);
  Work<> work = session_->group().AllReduceAsync(inputs, outputs, wire_op,
                                                 /*weight=*/1, options);
  return Track({Waiter(std::move(work)), nullptr,
                c10::make_intrusive<WorkFedgather>(getRank(), type, tensors),
                Context("all_reduce")});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFedgather::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  return AllReduce(tensors, opts.reduceOp, opts.timeout,
                   c10d::OpType::ALLREDUCE);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFedgather::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  return AllReduce(tensors, opts.reduceOp, opts.timeout,
                   c10d::OpType::ALLREDUCE_COALESCED);
}

// AllGatherLists gathers inputs[i] of every rank into outputs[i][rank]
// (allgather) or outputs[rank][i] (allgather_coalesced, after transposing
// here): one ALL_GATHER of every input into stacked [world, *shape]
// buffers, copied out to the caller's tensors when it completes.
c10::intrusive_ptr<c10d::Work> ProcessGroupFedgather::AllGatherLists(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, std::chrono::milliseconds timeout,
    c10d::OpType type, const char* name) {
  TORCH_CHECK(!inputs.empty(), "fedgather: ", name, " needs an input tensor");
  TORCH_CHECK(outputs.size() == inputs.size(), "fedgather: ", name, " got ",
              inputs.size(), " inputs but ", outputs.size(), " output lists");
  const int world = getSize();
  std::vector<at::Tensor> sources;  // contiguous inputs
  std::vector<at::Tensor> stacked;  // [world, *shape] each
  std::vector<ConstHostTensor> input_views;
  std::vector<MutableHostTensor> output_views;
  for (size_t i = 0; i < inputs.size(); ++i) {
    CheckTensor(inputs[i], "the all_gather input", /*in_place=*/false);
    TORCH_CHECK(static_cast<int>(outputs[i].size()) == world,
                "fedgather: ", name, " needs ", world,
                " output tensors (one per rank), got ", outputs[i].size());
    for (const at::Tensor& out : outputs[i]) {
      CheckTensor(out, "an all_gather output", /*in_place=*/false);
      TORCH_CHECK(out.scalar_type() == inputs[i].scalar_type() &&
                      out.sizes() == inputs[i].sizes(),
                  "fedgather: ", name,
                  " output tensors must have the input's "
                  "dtype and shape ",
                  inputs[i].sizes(), " (", inputs[i].scalar_type(), "), got ",
                  out.sizes(), " (", out.scalar_type(), ")");
    }
    sources.push_back(inputs[i].contiguous());
    stacked.push_back(at::empty(
        Stacked(world, inputs[i].sizes()),
        inputs[i].options().memory_format(at::MemoryFormat::Contiguous)));
    TensorSpec spec = SpecOf(NameOf(i), sources.back());
    input_views.push_back({spec, sources.back().data_ptr()});
    spec.shape.insert(spec.shape.begin(), world);
    output_views.push_back({std::move(spec), stacked.back().data_ptr()});
  }
  CollectiveOptions options;
  options.timeout = TimeoutOf(timeout);
  Work<> work =
      session_->group().AllGatherIntoAsync(input_views, output_views, options);
  std::vector<at::Tensor> flat_outputs;
  for (const auto& list : outputs) {
    flat_outputs.insert(flat_outputs.end(), list.begin(), list.end());
  }
  auto finish = [sources = std::move(sources), stacked,
                 outputs = outputs]() mutable {
    for (size_t i = 0; i < outputs.size(); ++i) {
      for (size_t r = 0; r < outputs[i].size(); ++r) {
        outputs[i][r].copy_(stacked[i][static_cast<int64_t>(r)]);
      }
    }
  };
  return Track({Waiter(std::move(work)), std::move(finish),
                c10::make_intrusive<WorkFedgather>(getRank(), type,
                                                   std::move(flat_outputs)),
                Context(name)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFedgather::allgather(
    std::vector<std::vector<at::Tensor>>& output_tensors,
    std::vector<at::Tensor>& input_tensors,
    const c10d::AllgatherOptions& opts) {
  return AllGatherLists(output_tensors, input_tensors, opts.timeout,
                        c10d::OpType::ALLGATHER, "all_gather");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFedgather::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists,
    std::vector<at::Tensor>& input_tensors,
    const c10d::AllgatherOptions& opts) {
  // output_lists[rank][i] receives rank's input i; AllGatherLists takes
  // them per input.
  TORCH_CHECK(static_cast<int>(output_lists.size()) == getSize(),
              "fedgather: allgather_coalesced needs one output list per rank (",
              getSize(), "), got ", output_lists.size());
  std::vector<std::vector<at::Tensor>> per_input(input_tensors.size());
  for (const auto& list : output_lists) {
    TORCH_CHECK(list.size() == input_tensors.size(),
                "fedgather: allgather_coalesced output lists must have one "
                "tensor per input (",
                input_tensors.size(), "), got ", list.size());
    for (size_t i = 0; i < list.size(); ++i) per_input[i].push_back(list[i]);
  }
  return AllGatherLists(per_input, input_tensors, opts.timeout,
                        c10d::OpType::ALLGATHER_COALESCED,
                        "allgather_coalesced");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFedgather::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  CheckTensor(input, "the all_gather_into_tensor input", /*in_place=*/false);
  CheckTensor(output, "the all_gather_into_tensor output", /*in_place=*/true);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "fedgather: all_gather_into_tensor output dtype ",
              output.scalar_type(), " differs from the input's ",
              input.scalar_type());
  TORCH_CHECK(output.numel() == input.numel() * getSize(),
              "fedgather: all_gather_into_tensor output must have world size "
              "(",
              getSize(), ") times the input's ", input.numel(),
              " elements, got ", output.numel());
  at::Tensor source = input.contiguous();
  TensorSpec spec = SpecOf(NameOf(0), source);
  std::vector<ConstHostTensor> inputs{{spec, source.data_ptr()}};
  spec.shape.insert(spec.shape.begin(), getSize());
  std::vector<MutableHostTensor> outputs{{spec, output.data_ptr()}};
  CollectiveOptions options;
  options.timeout = TimeoutOf(opts.timeout);
  Work<> work = session_->group().AllGatherIntoAsync(inputs, outputs, options);
  // `source` is kept alive by the finish step until the gather completes.
  return Track({Waiter(std::move(work)), [source] {},
                c10::make_intrusive<WorkFedgather>(
                    getRank(), c10d::OpType::_ALLGATHER_BASE,
                    std::vector<at::Tensor>{output}),
                Context("all_gather_into_tensor")});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFedgather::barrier(
    const c10d::BarrierOptions& opts) {
  // An all_gather of nothing: it completes once every rank has started it.
  CollectiveOptions options;
  options.timeout = TimeoutOf(opts.timeout);
  Work<std::vector<std::string>> work =
      session_->group().AllGatherBytesAsync(std::string(), options);
  return Track(
      {Waiter(std::move(work)), nullptr,
       c10::make_intrusive<WorkFedgather>(getRank(), c10d::OpType::BARRIER,
                                          std::vector<at::Tensor>{}),
       Context("barrier")});
}

}  // namespace fedgather::python
