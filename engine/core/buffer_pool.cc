#include "engine/core/buffer_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace traind::engine {

BufferPool::State::~State() {
  for (auto& [capacity, buffers] : free_by_capacity) {
    for (void* data : buffers) AlignedFree(data);
  }
}

BufferPool::BufferPool(size_t max_cached_bytes) : state_(std::make_shared<State>()) {
  state_->max_cached_bytes = max_cached_bytes;
}

std::shared_ptr<BufferPool> BufferPool::Create(size_t max_cached_bytes) {
  return std::shared_ptr<BufferPool>(new BufferPool(max_cached_bytes));
}

size_t BufferPool::BucketCapacity(size_t size_bytes) {
  if (size_bytes <= kTensorAlignment) return kTensorAlignment;
  // Highest power of two below size, then round up to the next quarter step of that octave.
  const int high_bit = 63 - __builtin_clzll(static_cast<unsigned long long>(size_bytes - 1));
  const size_t octave = size_t{1} << high_bit;
  const size_t step = octave >= 4 * kTensorAlignment ? octave / 4 : kTensorAlignment;
  return (size_bytes + step - 1) / step * step;
}

void BufferPool::Release(const std::weak_ptr<State>& weak_state, void* data, size_t capacity) {
  std::shared_ptr<State> state = weak_state.lock();
  if (state != nullptr) {
    std::lock_guard<std::mutex> lock(state->mutex);
    state->bytes_in_use -= capacity;
    if (state->cached_bytes + capacity <= state->max_cached_bytes) {
      state->free_by_capacity[capacity].push_back(data);
      state->cached_bytes += capacity;
      return;
    }
  }
  AlignedFree(data);
}

absl::StatusOr<std::shared_ptr<Buffer>> BufferPool::Acquire(size_t size_bytes) {
  const size_t capacity = BucketCapacity(size_bytes);
  void* data = nullptr;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    auto it = state_->free_by_capacity.find(capacity);
    if (it != state_->free_by_capacity.end() && !it->second.empty()) {
      data = it->second.back();
      it->second.pop_back();
      state_->cached_bytes -= capacity;
      ++state_->reuse_count;
    }
  }
  if (data == nullptr) data = AlignedAllocate(capacity);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", size_bytes, " bytes"));
  }
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->bytes_in_use += capacity;
    state_->peak_bytes_in_use = std::max(state_->peak_bytes_in_use, state_->bytes_in_use);
  }
  std::weak_ptr<State> weak_state = state_;
  return std::make_shared<Buffer>(data, size_bytes, capacity,
                                  [weak_state](void* ptr, size_t cap) {
                                    Release(weak_state, ptr, cap);
                                  });
}

absl::StatusOr<Tensor> BufferPool::AllocateTensor(DataType dtype, Shape shape) {
  if (!IsStorableType(dtype)) {
    return absl::UnimplementedError(absl::StrCat("unsupported dtype ", DataTypeName(dtype)));
  }
  auto count = ElementCount(shape);
  if (!count.ok()) return count.status();
  auto buffer = Acquire(static_cast<size_t>(*count) * ElementSize(dtype));
  if (!buffer.ok()) return buffer.status();
  return Tensor(dtype, std::move(shape), *std::move(buffer), *count);
}

size_t BufferPool::cached_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->cached_bytes;
}

size_t BufferPool::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->bytes_in_use;
}

size_t BufferPool::peak_bytes_in_use() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->peak_bytes_in_use;
}

size_t BufferPool::reuse_count() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->reuse_count;
}

}  // namespace traind::engine
