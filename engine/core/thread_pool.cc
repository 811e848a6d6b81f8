#include "engine/core/thread_pool.h"

#include <sched.h>

#include <algorithm>

namespace traind::engine {
namespace {

thread_local bool in_parallel_region = false;

int AvailableCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_available_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

ThreadPool& ThreadPool::Default() {
  // Leaked on purpose: worker threads must not be joined during static destruction.
  static ThreadPool* pool = new ThreadPool(AvailableCpus());
  return *pool;
}

void ThreadPool::WorkerLoop() {
  in_parallel_region = true;
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_available_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping_ and drained.
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_grain = std::max<int64_t>(1, min_grain);
  const int64_t max_chunks = (n + min_grain - 1) / min_grain;
  const int64_t chunks = std::min<int64_t>(num_threads(), max_chunks);
  if (chunks <= 1 || in_parallel_region) {
    fn(0, n);
    return;
  }
  const int64_t chunk_size = (n + chunks - 1) / chunks;
  // `remaining` is only touched under done_mutex, so a worker has finished with these locals before
  // the caller can observe zero and return.
  int64_t remaining = chunks - 1;
  std::mutex done_mutex;
  std::condition_variable done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int64_t c = 1; c < chunks; ++c) {
      const int64_t begin = c * chunk_size;
      const int64_t end = std::min(n, begin + chunk_size);
      queue_.push_back([&, begin, end] {
        if (begin < end) fn(begin, end);
        std::lock_guard<std::mutex> done_lock(done_mutex);
        if (--remaining == 0) done.notify_one();
      });
    }
  }
  work_available_.notify_all();
  in_parallel_region = true;
  fn(0, std::min(n, chunk_size));
  // Help drain the queue instead of idling: with concurrent callers this also guarantees progress.
  auto all_done = [&] {
    std::lock_guard<std::mutex> done_lock(done_mutex);
    return remaining == 0;
  };
  while (!all_done()) {
    std::function<void()> task;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!queue_.empty()) {
        task = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    if (task) {
      task();
      continue;
    }
    std::unique_lock<std::mutex> done_lock(done_mutex);
    done.wait(done_lock, [&] { return remaining == 0; });
  }
  in_parallel_region = false;
}

}  // namespace traind::engine
