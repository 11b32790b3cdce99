// The torch::Tensor adapter of Group: converts tensors to host buffer views,
// allocates outputs with LibTorch and calls the raw collectives. This is the
// only translation unit of the client library that includes LibTorch.
#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/group.h"
#include "client/torch_dtype.h"
#include "common/status_macros.h"

namespace fedgather {
namespace {

absl::StatusOr<TensorSpec> SpecOf(const std::string& name,
                                  const at::Tensor& tensor) {
  if (!tensor.defined()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' is undefined"));
  }
  if (!tensor.device().is_cpu() || !tensor.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' must be a contiguous CPU tensor"));
  }
  TensorSpec spec;
  spec.name = name;
  FG_ASSIGN_OR_RETURN(spec.dtype, DTypeOf(tensor));
  spec.shape.assign(tensor.sizes().begin(), tensor.sizes().end());
  return spec;
}

absl::StatusOr<ConstHostTensor> ViewOf(const std::string& name,
                                       const at::Tensor& tensor) {
  FG_ASSIGN_OR_RETURN(TensorSpec spec, SpecOf(name, tensor));
  return ConstHostTensor{std::move(spec), tensor.data_ptr()};
}

std::vector<int64_t> Stacked(int64_t world, at::IntArrayRef shape) {
  std::vector<int64_t> out{world};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

// The name a single, unnamed tensor travels under.
constexpr char kSingleTensorName[] = "tensor";

// Views of a name -> tensor map's inputs and of one new output each.
struct MapViews {
  std::vector<ConstHostTensor> views;
  std::vector<MutableHostTensor> outs;
  std::map<std::string, at::Tensor> result;  // name -> output
};

// MakeMapViews allocates an output per input, of the input's dtype and
// shape, with a leading dimension `leading` prepended when it is not 0.
// LibTorch errors are thrown (the caller converts them).
absl::StatusOr<MapViews> MakeMapViews(
    const std::map<std::string, at::Tensor>& inputs, int64_t leading) {
  MapViews map;
  for (const auto& [name, tensor] : inputs) {
    FG_ASSIGN_OR_RETURN(ConstHostTensor view, ViewOf(name, tensor));
    MutableHostTensor out_view{view.spec, nullptr};
    at::Tensor out;
    if (leading > 0) {
      out = at::empty(Stacked(leading, tensor.sizes()), tensor.options());
      out_view.spec.shape.insert(out_view.spec.shape.begin(), leading);
    } else {
      out = at::empty(tensor.sizes(), tensor.options());
    }
    out_view.data = out.data_ptr();
    map.views.push_back(std::move(view));
    map.outs.push_back(std::move(out_view));
    map.result.emplace(name, std::move(out));
  }
  return map;
}

}  // namespace

// Each torch collective runs as a queued body that holds its tensors by
// value (a reference each) and converts LibTorch's exceptions to a Status.
template <typename T, typename Body>
Work<T> Group::EnqueueTorch(Body body) {
  return Enqueue<T>([body = std::move(body)]() -> absl::StatusOr<T> {
    try {
      return body();
    } catch (const c10::Error& e) {
      return absl::InternalError(
          absl::StrCat("LibTorch: ", e.what_without_backtrace()));
    }
  });
}

Work<std::map<std::string, at::Tensor>> Group::AllGatherAsync(
    const std::map<std::string, at::Tensor>& inputs,
    const CollectiveOptions& options) {
  return EnqueueTorch<std::map<std::string, at::Tensor>>(
      [this, inputs,
       options]() -> absl::StatusOr<std::map<std::string, at::Tensor>> {
        FG_ASSIGN_OR_RETURN(MapViews map, MakeMapViews(inputs, world_size()));
        FG_RETURN_IF_ERROR(RunAllGatherInto(map.views, map.outs, options));
        return std::move(map.result);
      });
}

Work<at::Tensor> Group::AllGatherAsync(const at::Tensor& input,
                                       const CollectiveOptions& options) {
  return EnqueueTorch<at::Tensor>([this, input,
                                   options]() -> absl::StatusOr<at::Tensor> {
    FG_ASSIGN_OR_RETURN(
        MapViews map, MakeMapViews({{kSingleTensorName, input}}, world_size()));
    FG_RETURN_IF_ERROR(RunAllGatherInto(map.views, map.outs, options));
    return map.result.begin()->second;
  });
}

Work<> Group::AllGatherIntoAsync(const at::Tensor& input,
                                 const at::Tensor& output,
                                 const CollectiveOptions& options) {
  return EnqueueTorch<NoResult>([this, input, output,
                                 options]() -> absl::StatusOr<NoResult> {
    FG_ASSIGN_OR_RETURN(ConstHostTensor view, ViewOf(kSingleTensorName, input));
    FG_ASSIGN_OR_RETURN(TensorSpec out_spec, SpecOf(kSingleTensorName, output));
    const MutableHostTensor out_view{std::move(out_spec), output.data_ptr()};
    FG_RETURN_IF_ERROR(RunAllGatherInto(absl::MakeConstSpan(&view, 1),
                                        absl::MakeConstSpan(&out_view, 1),
                                        options));
    return NoResult{};
  });
}

Work<std::vector<at::Tensor>> Group::AllGatherVAsync(
    const at::Tensor& input, const CollectiveOptions& options) {
  return EnqueueTorch<std::vector<at::Tensor>>(
      [this, input, options]() -> absl::StatusOr<std::vector<at::Tensor>> {
        FG_ASSIGN_OR_RETURN(ConstHostTensor view,
                            ViewOf(kSingleTensorName, input));
        std::vector<at::Tensor> parts(world_size());
        const at::TensorOptions tensor_options = input.options();
        const PartAllocator allocate =
            [&](int rank, int index,
                const TensorSpec& spec) -> absl::StatusOr<void*> {
          try {
            parts[rank] = at::empty(
                spec.shape, tensor_options.dtype(ScalarTypeOf(spec.dtype)));
            return parts[rank].data_ptr();
          } catch (const c10::Error& e) {
            return absl::ResourceExhaustedError(
                absl::StrCat("cannot allocate rank ", rank,
                             "'s part: ", e.what_without_backtrace()));
          }
        };
        FG_RETURN_IF_ERROR(
            RunAllGatherV(absl::MakeConstSpan(&view, 1), allocate, options));
        for (at::Tensor& part : parts) {  // ranks a quorum round left out
          if (part.defined()) continue;
          std::vector<int64_t> shape(input.sizes().begin(),
                                     input.sizes().end());
          if (!shape.empty()) shape[0] = 0;
          part = at::empty(shape, tensor_options);
        }
        return parts;
      });
}

Work<> Group::BroadcastAsync(const at::Tensor& tensor, int root,
                             const CollectiveOptions& options) {
  return EnqueueTorch<NoResult>(
      [this, tensor, root, options]() -> absl::StatusOr<NoResult> {
        FG_ASSIGN_OR_RETURN(TensorSpec spec, SpecOf(kSingleTensorName, tensor));
        const MutableHostTensor view{std::move(spec), tensor.data_ptr()};
        FG_RETURN_IF_ERROR(
            RunBroadcast(absl::MakeConstSpan(&view, 1), root, options));
        return NoResult{};
      });
}

Work<std::map<std::string, at::Tensor>> Group::AllReduceAsync(
    const std::map<std::string, at::Tensor>& inputs, v1::ReduceOp op,
    double weight, const CollectiveOptions& options) {
  return EnqueueTorch<std::map<std::string, at::Tensor>>(
      [this, inputs, op, weight,
       options]() -> absl::StatusOr<std::map<std::string, at::Tensor>> {
        FG_ASSIGN_OR_RETURN(MapViews map, MakeMapViews(inputs, 0));
        FG_RETURN_IF_ERROR(
            RunAllReduce(map.views, map.outs, op, weight, options));
        return std::move(map.result);
      });
}

Work<at::Tensor> Group::AllReduceAsync(const at::Tensor& input, v1::ReduceOp op,
                                       double weight,
                                       const CollectiveOptions& options) {
  return EnqueueTorch<at::Tensor>([this, input, op, weight,
                                   options]() -> absl::StatusOr<at::Tensor> {
    FG_ASSIGN_OR_RETURN(MapViews map,
                        MakeMapViews({{kSingleTensorName, input}}, 0));
    FG_RETURN_IF_ERROR(RunAllReduce(map.views, map.outs, op, weight, options));
    return map.result.begin()->second;
  });
}

// The blocking forms.

absl::StatusOr<std::map<std::string, at::Tensor>> Group::AllGather(
    const std::map<std::string, at::Tensor>& inputs,
    const CollectiveOptions& options) {
  return AllGatherAsync(inputs, options).Get();
}

absl::StatusOr<at::Tensor> Group::AllGather(const at::Tensor& input,
                                            const CollectiveOptions& options) {
  return AllGatherAsync(input, options).Get();
}

absl::Status Group::AllGatherInto(const at::Tensor& input, at::Tensor& output,
                                  const CollectiveOptions& options) {
  return AllGatherIntoAsync(input, output, options).Wait();
}

absl::StatusOr<std::vector<at::Tensor>> Group::AllGatherV(
    const at::Tensor& input, const CollectiveOptions& options) {
  return AllGatherVAsync(input, options).Get();
}

absl::Status Group::Broadcast(at::Tensor& tensor, int root,
                              const CollectiveOptions& options) {
  return BroadcastAsync(tensor, root, options).Wait();
}

absl::StatusOr<std::map<std::string, at::Tensor>> Group::AllReduce(
    const std::map<std::string, at::Tensor>& inputs, v1::ReduceOp op,
    double weight, const CollectiveOptions& options) {
  return AllReduceAsync(inputs, op, weight, options).Get();
}

absl::StatusOr<at::Tensor> Group::AllReduce(const at::Tensor& input,
                                            v1::ReduceOp op, double weight,
                                            const CollectiveOptions& options) {
  return AllReduceAsync(input, op, weight, options).Get();
}

}  // namespace fedgather
