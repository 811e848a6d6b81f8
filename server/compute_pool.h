// ComputePool: the only threads that run models. Every TrainStep, Eval, optimizer step and model compilation of
// every session runs on one of its `workers` threads, so that on a machine of N cores at most `workers` steps run
// at once, each with its own OpenMP team (ThreadPool) that is reused step after step. RPC threads never run
// kernels: several sessions stepping at once share the cores instead of oversubscribing them, and no idle OpenMP
// team of another thread spins against the one that works (the known trap of a thread pool per caller).
//
// Admission is bounded: at most `max_queued` tasks wait; past that Run answers kResourceExhausted at once rather
// than building a backlog. Tasks run in arrival order.
#ifndef TRAIND_SERVER_COMPUTE_POOL_H_
#define TRAIND_SERVER_COMPUTE_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace traind {

class ComputePool {
 public:
  // The name of the workers' threads (and of their OpenMP helpers, which inherit it).
  static constexpr const char* kComputeThreadName = "traind-compute";

  // `workers` >= 1 threads; `max_queued` >= 0 tasks may wait for one.
  ComputePool(int workers, int max_queued);
  ~ComputePool();  // Runs what is queued, then joins the workers.
  ComputePool(const ComputePool&) = delete;
  ComputePool& operator=(const ComputePool&) = delete;

  // Runs `task` on a worker and returns its status once it has finished. `cancelled` is asked just before the
  // task would start: when it returns true the task is skipped and Run answers kCancelled (a client that gave up
  // or whose deadline passed while queued costs no compute). kResourceExhausted when the queue is full.
  absl::Status Run(const std::function<absl::Status()>& task, const std::function<bool()>& cancelled = nullptr);

  int workers() const { return static_cast<int>(threads_.size()); }
  int max_queued() const { return max_queued_; }
  // Tasks waiting (not running).
  int64_t queued() const;

 private:
  struct Pending;
  void WorkerLoop();
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); }

  const int max_queued_;
  mutable absl::Mutex mu_;
  std::deque<Pending*> queue_ ABSL_GUARDED_BY(mu_);  // waiting tasks
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace traind

#endif  // TRAIND_SERVER_COMPUTE_POOL_H_
