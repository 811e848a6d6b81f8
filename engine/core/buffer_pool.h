// Size-bucketed pool of aligned buffers. The executor allocates every intermediate from here, and a
// buffer returns to its bucket when the last Tensor holding it goes away (after its last consumer).
// Buckets: 4 per power of two, so a request wastes at most 25% and a freed buffer fits any later
// request of the same bucket. Thread-safe. Buffers may outlive the pool (they are then freed).
#ifndef TRAIND_ENGINE_CORE_BUFFER_POOL_H_
#define TRAIND_ENGINE_CORE_BUFFER_POOL_H_

#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/tensor.h"

namespace traind::engine {

class BufferPool {
 public:
  // `max_cached_bytes`: free buffers beyond this are released to the system instead of cached.
  static std::shared_ptr<BufferPool> Create(size_t max_cached_bytes = size_t{1} << 30);

  absl::StatusOr<std::shared_ptr<Buffer>> Acquire(size_t size_bytes);
  // An uninitialised tensor of the given shape from the pool.
  absl::StatusOr<Tensor> AllocateTensor(DataType dtype, Shape shape);

  size_t cached_bytes() const;
  size_t reuse_count() const;  // How many Acquire calls a cached buffer served (for tests).
  // Bytes (bucket capacities) handed out and not yet returned: now, and the most ever at once.
  size_t bytes_in_use() const;
  size_t peak_bytes_in_use() const;

  static size_t BucketCapacity(size_t size_bytes);

 private:
  struct State {
    std::mutex mutex;
    std::unordered_map<size_t, std::vector<void*>> free_by_capacity;
    size_t cached_bytes = 0;
    size_t max_cached_bytes = 0;
    size_t reuse_count = 0;
    size_t bytes_in_use = 0;
    size_t peak_bytes_in_use = 0;
    ~State();
  };
  explicit BufferPool(size_t max_cached_bytes);
  static void Release(const std::weak_ptr<State>& state, void* data, size_t capacity);

  std::shared_ptr<State> state_;
};

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_CORE_BUFFER_POOL_H_
