#include "engine/core/thread_pool.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <thread>

namespace traind::engine {
namespace {

int AvailableCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {}

ThreadPool& ThreadPool::Default() {
  static ThreadPool* pool = new ThreadPool(AvailableCpus());
  return *pool;
}

void ThreadPool::MakeCurrent() const { omp_set_num_threads(num_threads_); }

void ThreadPool::ParallelFor(int64_t n, int64_t min_grain,
                             const std::function<void(int64_t, int64_t)>& fn) const {
  if (n <= 0) return;
  min_grain = std::max<int64_t>(1, min_grain);
  const int64_t chunks = std::min<int64_t>(num_threads_, (n + min_grain - 1) / min_grain);
  if (chunks <= 1 || omp_in_parallel()) {
    fn(0, n);
    return;
  }
  const int64_t chunk_size = (n + chunks - 1) / chunks;
  // The team may be smaller than asked for (OMP_THREAD_LIMIT, OMP_DYNAMIC, or a compiler that ignores the pragma:
  // clang with GNU's OpenMP runtime runs the block once, on one thread), so each thread takes every team-size-th
  // chunk rather than assuming one chunk per thread.
#pragma omp parallel num_threads(static_cast<int>(chunks))
  {
    const int64_t team = omp_get_num_threads();
    for (int64_t chunk = omp_get_thread_num(); chunk < chunks; chunk += team) {
      const int64_t begin = chunk * chunk_size;
      const int64_t end = std::min(n, begin + chunk_size);
      if (begin < end) fn(begin, end);
    }
  }
}

}  // namespace traind::engine
