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

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_RUNTIME_CPU_EXECUTOR_H_
