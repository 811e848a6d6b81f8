// Intra-op parallelism for kernels. Backed by OpenMP — the runtime oneDNN (Debian's libdnnl is built with
// GNU OpenMP) already uses — so that the engine's own loops and oneDNN's primitives share one team of
// threads instead of two pools spinning against each other on few cores.
#ifndef TRAIND_ENGINE_CORE_THREAD_POOL_H_
#define TRAIND_ENGINE_CORE_THREAD_POOL_H_

#include <cstdint>
#include <functional>

namespace traind::engine {

class ThreadPool {
 public:
  // `num_threads` >= 1: the most threads one ParallelFor (and oneDNN, after MakeCurrent) uses.
  explicit ThreadPool(int num_threads);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Sized to the CPUs this process may run on.
  static ThreadPool& Default();

  int num_threads() const { return num_threads_; }

  // Math libraries called later from the calling thread (oneDNN through OpenMP) use num_threads() threads.
  void MakeCurrent() const;

  // Calls fn(begin, end) on disjoint chunks covering [0, n), each at least `min_grain` long (but the last),
  // in parallel, and returns when all are done. Nested calls (from inside a chunk) run inline.
  void ParallelFor(int64_t n, int64_t min_grain, const std::function<void(int64_t, int64_t)>& fn) const;

 private:
  int num_threads_;
};

inline constexpr int64_t kParallelElementThreshold = 1 << 16;

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_CORE_THREAD_POOL_H_
