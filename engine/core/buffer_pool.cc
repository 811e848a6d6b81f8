#include "engine/core/buffer_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace traind::engine {

BufferPool::State::~State() { DropCache(); }

void BufferPool::State::DropCache() {
  for (auto& [capacity, buffers] : free_by_capacity) {
    for (void* data : buffers) {
      AlignedFree(data, capacity);
      if (budget != nullptr) budget->Release(static_cast<int64_t>(capacity));
    }
  }
  free_by_capacity.clear();
  cached_bytes = 0;
}

BufferPool::BufferPool(size_t max_cached_bytes, std::shared_ptr<MemoryBudget> budget)
    : state_(std::make_shared<State>()), budget_(std::move(budget)) {
  state_->max_cached_bytes = max_cached_bytes;
  state_->budget = budget_;
  if (budget_ != nullptr) {
    // Other pools of the same budget (a session's training, eval and optimizer executors) may take back this
    // pool's idle buffers when they would otherwise be refused.
    budget_->AddReclaimer([weak_state = std::weak_ptr<State>(state_)] {
      std::shared_ptr<State> state = weak_state.lock();
      if (state == nullptr) return false;
      std::lock_guard<std::mutex> lock(state->mutex);
      state->DropCache();
      return true;
    });
  }
}

std::shared_ptr<BufferPool> BufferPool::Create(size_t max_cached_bytes, std::shared_ptr<MemoryBudget> budget) {
  return std::shared_ptr<BufferPool>(new BufferPool(max_cached_bytes, std::move(budget)));
}

size_t BufferPool::BucketCapacity(size_t size_bytes) {
  if (size_bytes <= kTensorAlignment) return kTensorAlignment;
  // Highest power of two below size, then round up to the next quarter step of that octave.
  const int high_bit = 63 - __builtin_clzll(static_cast<unsigned long long>(size_bytes - 1));
  const size_t octave = size_t{1} << high_bit;
  const size_t step = octave >= 4 * kTensorAlignment ? octave / 4 : kTensorAlignment;
  return (size_bytes + step - 1) / step * step;
}

void BufferPool::Release(const std::weak_ptr<State>& weak_state, const std::shared_ptr<MemoryBudget>& budget,
                         void* data, size_t capacity) {
  std::shared_ptr<State> state = weak_state.lock();
  if (state != nullptr) {
    std::lock_guard<std::mutex> lock(state->mutex);
    state->bytes_in_use -= capacity;
    if (state->cached_bytes + capacity <= state->max_cached_bytes) {
      state->free_by_capacity[capacity].push_back(data);  // still counted in the budget: the pool holds it
      state->cached_bytes += capacity;
      return;
    }
  }
  AlignedFree(data, capacity);
  if (budget != nullptr) budget->Release(static_cast<int64_t>(capacity));
}

absl::StatusOr<std::shared_ptr<Buffer>> BufferPool::Acquire(size_t size_bytes) {
  return Acquire(size_bytes, DataType::kUndefined, nullptr);
}

namespace {

std::string DescribeRequest(size_t size_bytes, DataType dtype, const Shape* shape) {
  if (shape == nullptr) return absl::StrCat("a buffer of ", size_bytes, " bytes");
  return absl::StrCat("a ", DataTypeName(dtype), " tensor of shape ", ShapeToString(*shape));
}

}  // namespace

absl::StatusOr<std::shared_ptr<Buffer>> BufferPool::Acquire(size_t size_bytes, DataType dtype, const Shape* shape) {
  // Sizes near the top of size_t would wrap in BucketCapacity; nothing that large can be allocated anyway.
  if (size_bytes > (size_t{1} << 62)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(DescribeRequest(size_bytes, dtype, shape), " is larger than any allocation can be"));
  }
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
  if (data == nullptr && budget_ != nullptr && !budget_->TryReserve(static_cast<int64_t>(capacity))) {
    // Before refusing, every pool of this budget (this one included) gives back its idle buffers.
    budget_->Reclaim();
    if (!budget_->TryReserve(static_cast<int64_t>(capacity))) {
      return budget_->Refusal(static_cast<int64_t>(capacity), DescribeRequest(size_bytes, dtype, shape));
    }
  }
  if (data == nullptr) data = AlignedAllocate(capacity);
  if (data == nullptr) {
    if (budget_ != nullptr) budget_->Release(static_cast<int64_t>(capacity));
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", DescribeRequest(size_bytes, dtype, shape), ": out of memory"));
  }
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->bytes_in_use += capacity;
    state_->peak_bytes_in_use = std::max(state_->peak_bytes_in_use, state_->bytes_in_use);
    state_->peak_bytes_held = std::max(state_->peak_bytes_held, state_->bytes_in_use + state_->cached_bytes);
  }
  std::weak_ptr<State> weak_state = state_;
  return std::make_shared<Buffer>(data, size_bytes, capacity,
                                  [weak_state, budget = budget_](void* ptr, size_t cap) {
                                    Release(weak_state, budget, ptr, cap);
                                  });
}

absl::StatusOr<Tensor> BufferPool::AllocateTensor(DataType dtype, Shape shape) {
  if (!IsStorableType(dtype)) {
    return absl::UnimplementedError(absl::StrCat("unsupported dtype ", DataTypeName(dtype)));
  }
  auto count = ElementCount(shape);
  if (!count.ok()) return count.status();
  const size_t element_size = ElementSize(dtype);
  if (static_cast<uint64_t>(*count) > (uint64_t{1} << 62) / element_size) {
    return absl::ResourceExhaustedError(absl::StrCat("a ", DataTypeName(dtype), " tensor of shape ",
                                                     ShapeToString(shape), " is larger than any allocation can be"));
  }
  auto buffer = Acquire(static_cast<size_t>(*count) * element_size, dtype, &shape);
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

size_t BufferPool::peak_bytes_held() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->peak_bytes_held;
}

size_t BufferPool::reuse_count() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->reuse_count;
}

}  // namespace traind::engine
