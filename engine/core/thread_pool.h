// A small fixed thread pool for intra-op parallelism. Kernels call ParallelFor; the calling thread
// always takes part, so a pool of N threads has N-1 workers. Nested ParallelFor calls (from inside a
// worker's chunk) run inline, which rules out deadlock by construction.
#ifndef TRAIND_ENGINE_CORE_THREAD_POOL_H_
#define TRAIND_ENGINE_CORE_THREAD_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace traind::engine {

class ThreadPool {
 public:
  // `num_threads` counts the caller; 1 means everything runs inline.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Process-wide pool sized to the CPUs this process may run on (sched_getaffinity).
  static ThreadPool& Default();

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over disjoint ranges covering [0, n), each at least `min_grain` long
  // (except possibly the last), and returns when all are done.
  void ParallelFor(int64_t n, int64_t min_grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop();

  std::mutex mutex_;
  std::condition_variable work_available_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

// Element count above which elementwise kernels split work across threads; below it the
// synchronisation costs more than it saves.
inline constexpr int64_t kParallelElementThreshold = 1 << 16;

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_CORE_THREAD_POOL_H_
