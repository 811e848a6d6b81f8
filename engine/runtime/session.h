// The engine's front door: load + compile a model once, then run it many times.
//
//   TRAIND_ASSIGN_OR_RETURN(auto session, Session::Create(model_proto));
//   TRAIND_ASSIGN_OR_RETURN(auto outputs, session->Run({{"x", x}}));
#ifndef TRAIND_ENGINE_RUNTIME_SESSION_H_
#define TRAIND_ENGINE_RUNTIME_SESSION_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/memory_budget.h"
#include "engine/runtime/cpu_executor.h"
#include "engine/runtime/plan.h"

namespace traind::engine {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct SessionOptions {
  // The threads kernels use (not owned: must outlive the session); null: ThreadPool::Default().
  ThreadPool* threads = nullptr;
  // Non-zero: random draws (Dropout without a seed attribute) repeat exactly across sessions with this seed.
  uint64_t random_seed = 0;
  // Null: unlimited. Otherwise the plan's constants are counted against it, Create refuses a plan whose peak
  // (PlanMemory) does not fit what is left, and every run allocates from a pool bound to it (kResourceExhausted
  // before an allocation that does not fit). Several sessions may share one budget.
  std::shared_ptr<MemoryBudget> memory_budget;
  // Added to the plan's peak in Create's check: memory the caller will hold while runs allocate (the previous
  // step's gradients of a training model).
  int64_t extra_resident_bytes = 0;
  // CPU plans keep activations channels-last between convolutions (engine/runtime/channels_last.h). Off only to
  // measure what that brings (train_bench --nochannels_last).
  bool channels_last = true;
  // Makes the executor for the compiled plan of `model` (the validated model it was compiled from), e.g. the GPU
  // executor (engine/gpu/gpu_executor.h); unset: a CpuExecutor with the threads and seed above. `host_buffers` is
  // the pool bound to memory_budget (null without one) for what the executor allocates on the host. With a
  // made executor Create counts the constants against the budget but does not check the plan's peak against it:
  // that executor's intermediates live in device memory, which has its own limit.
  std::function<absl::StatusOr<std::unique_ptr<Executor>>(
      std::shared_ptr<const Plan> plan, const onnx::ModelProto& model, std::shared_ptr<BufferPool> host_buffers)>
      make_executor;
};

// The free buffers a session's pool keeps for the next run (BufferPool's max_cached_bytes): 1 GiB, or twice the
// plan's peak (PlanMemory) when that is more. A run then finds every buffer it needs in the pool, bucket by bucket,
// once the first runs have filled it: with less, a model whose run needs more than the cap (full fine-tuning of a
// 12-layer BERT-size encoder: 1.15 GB) hands hundreds of MB back to the system after every run and faults them in
// again in the next. Under a MemoryBudget, other pools of the budget reclaim idle buffers before they are refused.
size_t PoolCacheBytes(const PlanMemory& memory);

class Session {
 public:
  // `model` must come from LoadModelFromBytes/File (validated). Uses a CpuExecutor unless options.make_executor.
  static absl::StatusOr<std::unique_ptr<Session>> Create(const onnx::ModelProto& model,
                                                         const SessionOptions& options = {});
  Session(std::shared_ptr<const Plan> plan, std::unique_ptr<Executor> executor,
          MemoryReservation constants = MemoryReservation())
      : plan_(std::move(plan)), executor_(std::move(executor)), constants_(std::move(constants)) {}

  const Plan& plan() const { return *plan_; }
  // For benchmarks and diagnostics (profiles, pool statistics).
  Executor& executor() const { return *executor_; }

  // Fast path: inputs in plan().inputs order, outputs in plan().outputs order.
  absl::StatusOr<std::vector<Tensor>> Run(absl::Span<const Tensor> inputs) const {
    return executor_->Run(*plan_, inputs);
  }
  // With donations for in-place updates (RunOptions in executor.h).
  absl::StatusOr<std::vector<Tensor>> Run(absl::Span<const Tensor> inputs, const RunOptions& options) const {
    return executor_->RunWithOptions(*plan_, inputs, options);
  }
  // By name: every graph input exactly once; returns every graph output with its name.
  absl::StatusOr<NamedTensors> Run(const NamedTensors& inputs) const;

 private:
  std::shared_ptr<const Plan> plan_;
  std::unique_ptr<Executor> executor_;
  MemoryReservation constants_;  // the plan's constants, in the budget
};

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_RUNTIME_SESSION_H_
