// Size-bucketed pool of aligned buffers. The executor allocates every intermediate from here, and a
// buffer returns to its bucket when the last Tensor holding it goes away (after its last consumer).
// Buckets: 4 per power of two, so a request wastes at most 25% and a freed buffer fits any later
// request of the same bucket. (Serving a request from a free buffer of a larger bucket, up to twice its size, held
// less on a 2-layer encoder but inflated what is in use at once: +44 MB at 6 layers. Buckets stay exact.)
// Thread-safe. Buffers may outlive the pool (they are then freed).
#ifndef TRAIND_ENGINE_CORE_BUFFER_POOL_H_
#define TRAIND_ENGINE_CORE_BUFFER_POOL_H_

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/memory_budget.h"
#include "engine/core/tensor.h"

namespace traind::engine {

class BufferPool {
 public:
  // `max_cached_bytes`: free buffers beyond this are released to the system instead of cached.
  // `budget` (may be null: unlimited): every byte the pool takes from the system, cached free buffers included,
  // counts against it; a request that does not fit even after the cache is emptied is refused with
  // kResourceExhausted before anything is allocated.
  static std::shared_ptr<BufferPool> Create(size_t max_cached_bytes = size_t{1} << 30,
                                            std::shared_ptr<MemoryBudget> budget = nullptr);

  absl::StatusOr<std::shared_ptr<Buffer>> Acquire(size_t size_bytes);
  // An uninitialised tensor of the given shape from the pool.
  absl::StatusOr<Tensor> AllocateTensor(DataType dtype, Shape shape);

  size_t cached_bytes() const;
  size_t reuse_count() const;  // How many Acquire calls a cached buffer served (for tests).
  // Bytes (bucket capacities) handed out and not yet returned: now, and the most ever at once.
  size_t bytes_in_use() const;
  size_t peak_bytes_in_use() const;
  // The most ever held at once, free cached buffers included: what the pool cost in memory.
  size_t peak_bytes_held() const;

  static size_t BucketCapacity(size_t size_bytes);
  const std::shared_ptr<MemoryBudget>& budget() const { return budget_; }

 private:
  struct State {
    std::mutex mutex;
    std::unordered_map<size_t, std::vector<void*>> free_by_capacity;
    size_t cached_bytes = 0;
    size_t max_cached_bytes = 0;
    size_t reuse_count = 0;
    size_t bytes_in_use = 0;
    size_t peak_bytes_in_use = 0;
    size_t peak_bytes_held = 0;
    std::shared_ptr<MemoryBudget> budget;
    ~State();
    // Frees every cached buffer (their bytes leave the budget). Caller holds `mutex`.
    void DropCache();
  };
  BufferPool(size_t max_cached_bytes, std::shared_ptr<MemoryBudget> budget);
  static void Release(const std::weak_ptr<State>& state, const std::shared_ptr<MemoryBudget>& budget, void* data,
                      size_t capacity);
  // `dtype` and `shape` (may be null) only name the request in a refusal.
  absl::StatusOr<std::shared_ptr<Buffer>> Acquire(size_t size_bytes, DataType dtype, const Shape* shape);

  std::shared_ptr<State> state_;
  std::shared_ptr<MemoryBudget> budget_;
};

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_CORE_BUFFER_POOL_H_
