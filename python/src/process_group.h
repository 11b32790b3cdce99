// ProcessGroupFedgather: the c10d ProcessGroup of torch.distributed's
// "fedgather" backend (torch 1.13's c10d API), on one joined fedgather
// Session. Each collective is started on the Group at once (its ...Async
// form) and returns a WorkFedgather; collectives run one at a time in the
// order they were called, as on every fedgather Group.
//
// Supported: broadcast, allreduce and allreduce_coalesced (SUM, AVG, MIN,
// MAX), allgather, _allgather_base (all_gather_into_tensor),
// allgather_coalesced, barrier. Tensors must be CPU tensors of a dtype
// fedgather carries; tensors written in place (broadcast, allreduce,
// _allgather_base's output) must be contiguous. Local argument errors throw
// at once (c10::Error, a RuntimeError in Python) on this rank only; errors
// of the collective itself (from the server, the same on every rank) are
// thrown by the Work's wait() as StatusError.
//
// Threading: any thread may start collectives. One completion thread per
// process group waits for the Works in order, copies results where the
// outputs are not written in place, and completes the c10d Work and its
// Future (whose callbacks run on that thread, as with gloo). The
// destructor waits for collectives still in flight, without the GIL: that
// thread takes it to run Python callbacks and to free tensors whose
// PyObjects they own (docs/threading.md).
#ifndef FEDGATHER_PYTHON_SRC_PROCESS_GROUP_H_
#define FEDGATHER_PYTHON_SRC_PROCESS_GROUP_H_

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "python/src/session.h"

namespace fedgather::python {

// WorkFedgather is the c10d Work of one collective: wait() blocks until it
// completes and throws its error; is_completed() never blocks; getFuture()
// completes with the collective's output tensors.
class WorkFedgather : public c10d::Work {
 public:
  WorkFedgather(int rank, c10d::OpType op, std::vector<at::Tensor> outputs);

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return future_;
  }
  std::vector<at::Tensor> result() override { return outputs_; }

  // Complete marks the collective done: the future first, then the Work
  // (waking wait()). Called once, by the completion thread.
  void Complete(const absl::Status& status, const std::string& context);

 private:
  const std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupFedgather : public c10d::ProcessGroup {
 public:
  // `timeout` bounds each collective on this side (the server's round
  // deadline is the primary bound).
  ProcessGroupFedgather(std::shared_ptr<Session> session,
                        std::chrono::milliseconds timeout);
  ~ProcessGroupFedgather() override;

  const std::string getBackendName() const override { return "fedgather"; }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts =
          c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& output_tensors,
      std::vector<at::Tensor>& input_tensors,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists,
      std::vector<at::Tensor>& input_tensors,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;

  const std::shared_ptr<Session>& session() const { return session_; }

 private:
  // A started collective: `wait` waits for the fedgather Work; `finish`
  // (optional) then copies results into the caller's outputs.
  struct Pending {
    std::function<absl::Status()> wait;
    std::function<void()> finish;  // may throw c10::Error
    c10::intrusive_ptr<WorkFedgather> work;
    std::string context;  // "fedgather all_gather (group G, rank R)"
  };

  std::string Context(const char* op) const;
  absl::Duration TimeoutOf(std::chrono::milliseconds requested) const;
  c10::intrusive_ptr<c10d::Work> Track(Pending pending);
  c10::intrusive_ptr<c10d::Work> AllReduce(std::vector<at::Tensor>& tensors,
                                           const c10d::ReduceOp& op,
                                           std::chrono::milliseconds timeout,
                                           c10d::OpType type);
  c10::intrusive_ptr<c10d::Work> AllGatherLists(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs, std::chrono::milliseconds timeout,
      c10d::OpType type, const char* name);
  void CompletionLoop();

  const std::shared_ptr<Session> session_;
  const std::chrono::milliseconds timeout_;

  absl::Mutex mu_;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread completion_thread_;
};

}  // namespace fedgather::python

#endif  // FEDGATHER_PYTHON_SRC_PROCESS_GROUP_H_
