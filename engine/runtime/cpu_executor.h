// Runs a Plan on the CPU: one pass over the schedule, intermediates drawn from a size-bucketed
// BufferPool and released after their last consumer, kernels parallelised on a ThreadPool.
#ifndef TRAIND_ENGINE_RUNTIME_CPU_EXECUTOR_H_
#define TRAIND_ENGINE_RUNTIME_CPU_EXECUTOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/core/buffer_pool.h"
#include "engine/core/thread_pool.h"
#include "engine/runtime/executor.h"

namespace traind::engine {

class CpuExecutor : public Executor {
 public:
  // Defaults: ThreadPool::Default() and a fresh pool. `random_seed` != 0 makes every run's random draws (Dropout
  // without a seed attribute) a function of the seed, the number of runs before it and the node.
  explicit CpuExecutor(ThreadPool* threads = nullptr,
                       std::shared_ptr<BufferPool> buffers = nullptr, uint64_t random_seed = 0);

  absl::StatusOr<std::vector<Tensor>> Run(const Plan& plan,
                                          absl::Span<const Tensor> inputs) const override;
  // Honours every donation the plan allows (a donated input's sole reader, its buffer not shared with another input).
  absl::StatusOr<std::vector<Tensor>> RunWithOptions(const Plan& plan, absl::Span<const Tensor> inputs,
                                                     const RunOptions& options) const override;

  BufferPool& buffers() const { return *buffers_; }

  // Per-node wall time, accumulated over runs, for benchmarks. Not thread-safe: enable only when one
  // thread runs the executor. `seconds_per_node` is indexed like Plan::nodes.
  struct Profile {
    std::vector<double> seconds_per_node;
    int64_t runs = 0;
  };
  void EnableProfiling(Profile* profile) { profile_ = profile; }

 private:
  Profile* profile_ = nullptr;
  ThreadPool& threads_;
  std::shared_ptr<BufferPool> buffers_;
  uint64_t random_seed_;
  mutable std::atomic<uint64_t> runs_{0};
};

// The steps of a CPU run, shared with executors that run some nodes on the CPU (engine/gpu/gpu_executor.h).
// The seed of a run: a function of the session's seed and how many runs came before (0 without a seed).
uint64_t RunRandomSeed(uint64_t session_seed, uint64_t run_index);
// Runs one node on the CPU over the run's slots: its kernel with pooled outputs, exceptions turned into errors
// naming the node, every wanted output checked. `run_seed` from RunRandomSeed; `donated_positions` (ascending):
// the node's inputs donated to it in this run (KernelContext::ReuseInputAsOutput), none by default.
absl::Status RunNodeOnCpu(const PlannedNode& node, std::vector<Tensor>& slots,
                          BufferPool& buffers, ThreadPool& threads, uint64_t run_seed,
                          absl::Span<const int> donated_positions = {});

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_RUNTIME_CPU_EXECUTOR_H_
