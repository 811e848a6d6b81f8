#include "server/compute_pool.h"

#include <pthread.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace traind {

// Lives on the caller's stack: Run waits until `done`, so the worker never touches it afterwards.
struct ComputePool::Pending {
  const std::function<absl::Status()>* task;
  const std::function<bool()>* cancelled;
  absl::Status status;
  bool done = false;
};

ComputePool::ComputePool(int workers, int max_queued) : max_queued_(std::max(0, max_queued)) {
  workers = std::max(1, workers);
  threads_.reserve(workers);
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

ComputePool::~ComputePool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

int64_t ComputePool::queued() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size());
}

absl::Status ComputePool::Run(const std::function<absl::Status()>& task, const std::function<bool()>& cancelled) {
  Pending pending{&task, cancelled ? &cancelled : nullptr, absl::OkStatus(), false};
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the daemon is shutting down");
  // Queued tasks that a free worker (one not running a task) is about to take do not count as waiting.
  const int free_workers = workers() - running_;
  if (static_cast<int>(queue_.size()) + 1 > max_queued_ + free_workers) {
    return absl::ResourceExhaustedError(
        absl::StrCat("too many steps waiting for a compute thread (", queue_.size(), "); retry later"));
  }
  queue_.push_back(&pending);
  mu_.Await(absl::Condition(&pending.done));
  return pending.status;
}

void ComputePool::WorkerLoop() {
  // Named for operators (top -H, perf) and for bench/rpc_bench, which tells the daemon's compute from its RPC
  // threads by it. The OpenMP team's helper threads this worker starts inherit the name.
  pthread_setname_np(pthread_self(), kComputeThreadName);
  for (;;) {
    Pending* pending = nullptr;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &ComputePool::HasWorkOrStopping));
      if (queue_.empty()) return;  // stopping, and nothing left to run
      pending = queue_.front();
      queue_.pop_front();
      ++running_;
    }
    absl::Status status;
    if (pending->cancelled != nullptr && (*pending->cancelled)()) {
      status = absl::CancelledError("the call was cancelled or its deadline passed while it waited for a compute thread");
    } else {
      status = (*pending->task)();
    }
    absl::MutexLock lock(&mu_);
    --running_;
    pending->status = std::move(status);
    pending->done = true;
  }
}

}  // namespace traind
