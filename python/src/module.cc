// fedgather._C: the Python bindings. Session (join a group; the collectives
// of the Pythonic API on torch tensors), the torch.distributed process group
// factory, and fedgather.Error. The Python package (python/fedgather) wraps
// these; nothing here is meant to be used directly.
//
// Every call that may block releases the GIL. Errors are StatusError
// (fedgather.Error, a RuntimeError) with the status code and the server's
// message.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/group.h"
#include "client/torch/torch_collectives.h"
#include "common/data_plane_name.h"
#include "python/src/error.h"
#include "python/src/process_group.h"
#include "python/src/session.h"

namespace fedgather::python {
namespace {

namespace py = pybind11;

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value, const Session& session,
               const char* op) {
  if (!value.ok()) {
    throw StatusError(
        absl::StrCat("fedgather ", op, " (group ", session.group().name(),
                     ", rank ", session.group().rank(), ")"),
        value.status());
  }
  return *std::move(value);
}

v1::ReduceOp ReduceOpOf(const std::string& name) {
  if (name == "sum") return v1::SUM;
  if (name == "mean") return v1::MEAN;
  if (name == "min") return v1::MIN;
  if (name == "max") return v1::MAX;
  if (name == "weighted_mean") return v1::WEIGHTED_MEAN;
  throw py::value_error(
      absl::StrCat("unknown reduce op '", name,
                   "' (expected sum, mean, min, max or weighted_mean)"));
}

CollectiveOptions OptionsOf(double timeout_seconds,
                            std::vector<int>* contributors) {
  CollectiveOptions options;
  options.timeout = absl::Seconds(timeout_seconds);
  options.contributors = contributors;
  return options;
}

// Each collective of the Pythonic API returns (result, contributors).
template <typename T>
using WithContributors = std::pair<T, std::vector<int>>;

using TensorMap = std::map<std::string, at::Tensor>;

}  // namespace
}  // namespace fedgather::python

PYBIND11_MODULE(_C, m) {
  namespace py = pybind11;
  using namespace fedgather;          // NOLINT
  using namespace fedgather::python;  // NOLINT
  // The Python Session (python/src/session.h), not the client's membership
  // (client/session.h) that its Group holds.
  using fedgather::python::Session;
  m.doc() = "fedgather C++ extension (use the fedgather package instead)";
  py::register_exception<StatusError>(m, "Error", PyExc_RuntimeError);

  py::class_<Session, std::shared_ptr<Session>>(m, "Session")
      .def_static(
          "join",
          [](const std::string& server, const std::string& tls_dir,
             const std::string& group, int world_size, std::optional<int> rank,
             double timeout_seconds, const std::string& peer_listen,
             const std::string& peer_advertise) {
            SessionOptions options;
            options.server = server;
            options.tls_dir = tls_dir;
            options.group = group;
            options.world_size = world_size;
            options.rank = rank;
            options.join_timeout = absl::Seconds(timeout_seconds);
            options.peer_listen = peer_listen;
            options.peer_advertise = peer_advertise;
            absl::StatusOr<std::shared_ptr<Session>> session;
            {
              py::gil_scoped_release release;
              session = Session::Join(options);
            }
            if (!session.ok()) {
              throw StatusError(absl::StrCat("fedgather join (group ", group,
                                             " at ", server, ")"),
                                session.status());
            }
            return *std::move(session);
          },
          py::arg("server"), py::arg("tls_dir"), py::arg("group"),
          py::arg("world_size"), py::arg("rank") = std::nullopt,
          py::arg("timeout") = 300.0, py::arg("peer_listen") = "",
          py::arg("peer_advertise") = "")
      .def_property_readonly("rank",
                             [](const Session& s) { return s.group().rank(); })
      .def_property_readonly(
          "world_size", [](const Session& s) { return s.group().world_size(); })
      .def_property_readonly("group",
                             [](const Session& s) { return s.group().name(); })
      .def_property_readonly("epoch",
                             [](const Session& s) { return s.group().epoch(); })
      .def_property_readonly(
          "identities", [](const Session& s) { return s.group().identities(); })
      .def_property_readonly(
          "peer_endpoints",
          [](const Session& s) { return s.group().peer_endpoints(); })
      .def_property_readonly(
          "data_plane",
          [](const Session& s) {
            return std::string(DataPlaneName(s.group().data_plane()));
          })
      .def_property_readonly(
          "data_plane_reason",
          [](const Session& s) { return s.group().data_plane_reason(); })
      .def_property_readonly("server", &Session::server)
      .def(
          "all_gather",
          [](const Session& s, const at::Tensor& tensor, double timeout) {
            std::vector<int> contributors;
            absl::StatusOr<at::Tensor> out;
            {
              py::gil_scoped_release release;
              out = client::torch::AllGather(s.group(), tensor,
                                             OptionsOf(timeout, &contributors));
            }
            return WithContributors<at::Tensor>{
                ValueOrThrow(std::move(out), s, "all_gather"),
                std::move(contributors)};
          },
          py::arg("tensor"), py::arg("timeout"))
      .def(
          "all_gather_map",
          [](const Session& s, const TensorMap& tensors, double timeout) {
            std::vector<int> contributors;
            absl::StatusOr<TensorMap> out;
            {
              py::gil_scoped_release release;
              out = client::torch::AllGather(s.group(), tensors,
                                             OptionsOf(timeout, &contributors));
            }
            return WithContributors<TensorMap>{
                ValueOrThrow(std::move(out), s, "all_gather"),
                std::move(contributors)};
          },
          py::arg("tensors"), py::arg("timeout"))
      .def(
          "all_gather_v",
          [](const Session& s, const at::Tensor& tensor, double timeout) {
            std::vector<int> contributors;
            absl::StatusOr<std::vector<at::Tensor>> out;
            {
              py::gil_scoped_release release;
              out = client::torch::AllGatherV(
                  s.group(), tensor, OptionsOf(timeout, &contributors));
            }
            return WithContributors<std::vector<at::Tensor>>{
                ValueOrThrow(std::move(out), s, "all_gather_v"),
                std::move(contributors)};
          },
          py::arg("tensor"), py::arg("timeout"))
      .def(
          "all_gather_bytes",
          [](const Session& s, const std::string& bytes, double timeout) {
            std::vector<int> contributors;
            absl::StatusOr<std::vector<std::string>> out;
            {
              py::gil_scoped_release release;
              out = s.group().AllGatherBytes(bytes,
                                             OptionsOf(timeout, &contributors));
            }
            std::vector<std::string> parts =
                ValueOrThrow(std::move(out), s, "all_gather_bytes");
            py::list result;
            for (const std::string& part : parts)
              result.append(py::bytes(part));
            return std::make_pair(result, std::move(contributors));
          },
          py::arg("data"), py::arg("timeout"))
      .def(
          "all_reduce",
          [](const Session& s, const at::Tensor& tensor, const std::string& op,
             double weight, double timeout) {
            const v1::ReduceOp wire_op = ReduceOpOf(op);
            std::vector<int> contributors;
            absl::StatusOr<at::Tensor> out;
            {
              py::gil_scoped_release release;
              out = client::torch::AllReduce(s.group(), tensor, wire_op, weight,
                                             OptionsOf(timeout, &contributors));
            }
            return WithContributors<at::Tensor>{
                ValueOrThrow(std::move(out), s, "all_reduce"),
                std::move(contributors)};
          },
          py::arg("tensor"), py::arg("op"), py::arg("weight"),
          py::arg("timeout"))
      .def(
          "all_reduce_map",
          [](const Session& s, const TensorMap& tensors, const std::string& op,
             double weight, double timeout) {
            const v1::ReduceOp wire_op = ReduceOpOf(op);
            std::vector<int> contributors;
            absl::StatusOr<TensorMap> out;
            {
              py::gil_scoped_release release;
              out =
                  client::torch::AllReduce(s.group(), tensors, wire_op, weight,
                                           OptionsOf(timeout, &contributors));
            }
            return WithContributors<TensorMap>{
                ValueOrThrow(std::move(out), s, "all_reduce"),
                std::move(contributors)};
          },
          py::arg("tensors"), py::arg("op"), py::arg("weight"),
          py::arg("timeout"))
      .def(
          "broadcast",
          [](const Session& s, at::Tensor tensor, int root, double timeout) {
            std::vector<int> contributors;
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = client::torch::Broadcast(
                  s.group(), tensor, root, OptionsOf(timeout, &contributors));
            }
            if (!status.ok()) {
              ValueOrThrow(absl::StatusOr<int>(status), s, "broadcast");
            }
            return WithContributors<at::Tensor>{tensor,
                                                std::move(contributors)};
          },
          py::arg("tensor"), py::arg("root"), py::arg("timeout"));

  m.def(
      "create_process_group",
      [](std::shared_ptr<Session> session, std::chrono::milliseconds timeout)
          -> c10::intrusive_ptr<c10d::ProcessGroup> {
        return c10::make_intrusive<ProcessGroupFedgather>(std::move(session),
                                                          timeout);
      },
      py::arg("session"), py::arg("timeout"));
}
