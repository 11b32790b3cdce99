// The torch::Tensor adapter of Group: converts tensors to host buffer views,
// allocates outputs with LibTorch and runs the raw collectives on the
// group's queue (Submit).
#include "client/torch/torch_collectives.h"

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/group.h"
#include "client/torch/torch_dtype.h"
#include "common/status_macros.h"

namespace fedgather::client::torch {
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

// Each torch collective runs as a body on the group's queue that holds its
// tensors by value (a reference each) and converts LibTorch's exceptions to
// a Status.
template <typename T, typename Body>
Work<T> SubmitTorch(Group& group, Body body) {
  return group.Submit<T>(
      [body = std::move(body)](Group::InQueue& in) -> absl::StatusOr<T> {
        try {
          return body(in);
        } catch (const c10::Error& e) {
          return absl::InternalError(
              absl::StrCat("LibTorch: ", e.what_without_backtrace()));
        }
      });
}

}  // namespace

Work<std::map<std::string, at::Tensor>> AllGatherAsync(
    Group& group, const std::map<std::string, at::Tensor>& inputs,
    const CollectiveOptions& options) {
  return SubmitTorch<std::map<std::string, at::Tensor>>(
      group,
      [inputs, options](Group::InQueue& in)
          -> absl::StatusOr<std::map<std::string, at::Tensor>> {
        FG_ASSIGN_OR_RETURN(MapViews map,
                            MakeMapViews(inputs, in.world_size()));
        FG_RETURN_IF_ERROR(in.AllGatherInto(map.views, map.outs, options));
        return std::move(map.result);
      });
}

Work<at::Tensor> AllGatherAsync(Group& group, const at::Tensor& input,
                                const CollectiveOptions& options) {
  return SubmitTorch<at::Tensor>(
      group,
      [input, options](Group::InQueue& in) -> absl::StatusOr<at::Tensor> {
        FG_ASSIGN_OR_RETURN(
            MapViews map,
            MakeMapViews({{kSingleTensorName, input}}, in.world_size()));
        FG_RETURN_IF_ERROR(in.AllGatherInto(map.views, map.outs, options));
        return map.result.begin()->second;
      });
}

Work<> AllGatherIntoAsync(Group& group, const at::Tensor& input,
                          const at::Tensor& output,
                          const CollectiveOptions& options) {
  return SubmitTorch<NoResult>(
      group,
      [input, output, options](Group::InQueue& in) -> absl::StatusOr<NoResult> {
        FG_ASSIGN_OR_RETURN(ConstHostTensor view,
                            ViewOf(kSingleTensorName, input));
        FG_ASSIGN_OR_RETURN(TensorSpec out_spec,
                            SpecOf(kSingleTensorName, output));
        const MutableHostTensor out_view{std::move(out_spec),
                                         output.data_ptr()};
        FG_RETURN_IF_ERROR(in.AllGatherInto(absl::MakeConstSpan(&view, 1),
                                            absl::MakeConstSpan(&out_view, 1),
                                            options));
        return NoResult{};
      });
}

Work<std::vector<at::Tensor>> AllGatherVAsync(
    Group& group, const at::Tensor& input, const CollectiveOptions& options) {
  return SubmitTorch<std::vector<at::Tensor>>(
      group,
      [input,
       options](Group::InQueue& in) -> absl::StatusOr<std::vector<at::Tensor>> {
        FG_ASSIGN_OR_RETURN(ConstHostTensor view,
                            ViewOf(kSingleTensorName, input));
        std::vector<at::Tensor> parts(in.world_size());
        const at::TensorOptions tensor_options = input.options();
        const Group::PartAllocator allocate =
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
            in.AllGatherV(absl::MakeConstSpan(&view, 1), allocate, options));
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

Work<> BroadcastAsync(Group& group, const at::Tensor& tensor, int root,
                      const CollectiveOptions& options) {
  return SubmitTorch<NoResult>(
      group,
      [tensor, root, options](Group::InQueue& in) -> absl::StatusOr<NoResult> {
        FG_ASSIGN_OR_RETURN(TensorSpec spec, SpecOf(kSingleTensorName, tensor));
        const MutableHostTensor view{std::move(spec), tensor.data_ptr()};
        FG_RETURN_IF_ERROR(
            in.Broadcast(absl::MakeConstSpan(&view, 1), root, options));
        return NoResult{};
      });
}

Work<std::map<std::string, at::Tensor>> AllReduceAsync(
    Group& group, const std::map<std::string, at::Tensor>& inputs,
    v1::ReduceOp op, double weight, const CollectiveOptions& options) {
  return SubmitTorch<std::map<std::string, at::Tensor>>(
      group,
      [inputs, op, weight, options](Group::InQueue& in)
          -> absl::StatusOr<std::map<std::string, at::Tensor>> {
        FG_ASSIGN_OR_RETURN(MapViews map, MakeMapViews(inputs, 0));
        FG_RETURN_IF_ERROR(
            in.AllReduce(map.views, map.outs, op, weight, options));
        return std::move(map.result);
      });
}

Work<at::Tensor> AllReduceAsync(Group& group, const at::Tensor& input,
                                v1::ReduceOp op, double weight,
                                const CollectiveOptions& options) {
  return SubmitTorch<at::Tensor>(
      group,
      [input, op, weight,
       options](Group::InQueue& in) -> absl::StatusOr<at::Tensor> {
        FG_ASSIGN_OR_RETURN(MapViews map,
                            MakeMapViews({{kSingleTensorName, input}}, 0));
        FG_RETURN_IF_ERROR(
            in.AllReduce(map.views, map.outs, op, weight, options));
        return map.result.begin()->second;
      });
}

// The blocking forms.

absl::StatusOr<std::map<std::string, at::Tensor>> AllGather(
    Group& group, const std::map<std::string, at::Tensor>& inputs,
    const CollectiveOptions& options) {
  return AllGatherAsync(group, inputs, options).Get();
}

absl::StatusOr<at::Tensor> AllGather(Group& group, const at::Tensor& input,
                                     const CollectiveOptions& options) {
  return AllGatherAsync(group, input, options).Get();
}

absl::Status AllGatherInto(Group& group, const at::Tensor& input,
                           at::Tensor& output,
                           const CollectiveOptions& options) {
  return AllGatherIntoAsync(group, input, output, options).Wait();
}

absl::StatusOr<std::vector<at::Tensor>> AllGatherV(
    Group& group, const at::Tensor& input, const CollectiveOptions& options) {
  return AllGatherVAsync(group, input, options).Get();
}

absl::Status Broadcast(Group& group, at::Tensor& tensor, int root,
                       const CollectiveOptions& options) {
  return BroadcastAsync(group, tensor, root, options).Wait();
}

absl::StatusOr<std::map<std::string, at::Tensor>> AllReduce(
    Group& group, const std::map<std::string, at::Tensor>& inputs,
    v1::ReduceOp op, double weight, const CollectiveOptions& options) {
  return AllReduceAsync(group, inputs, op, weight, options).Get();
}

absl::StatusOr<at::Tensor> AllReduce(Group& group, const at::Tensor& input,
                                     v1::ReduceOp op, double weight,
                                     const CollectiveOptions& options) {
  return AllReduceAsync(group, input, op, weight, options).Get();
}

}  // namespace fedgather::client::torch
