// Tensor: dtype + shape + a shared, 64-byte-aligned CPU buffer. Copying a Tensor copies a
// shared_ptr, never the data. Invariant: buffer()->size_bytes() >= num_elements() * ElementSize.
// Several tensors may share one buffer (Reshape and friends alias their input); kernels never write
// into their inputs, so sharing is safe.
#ifndef TRAIND_ENGINE_CORE_TENSOR_H_
#define TRAIND_ENGINE_CORE_TENSOR_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/core/dtype.h"
#include "engine/core/shape.h"

namespace traind::engine {

inline constexpr size_t kTensorAlignment = 64;

// One aligned allocation. Freed (or returned to its pool) by the deleter given at construction.
class Buffer {
 public:
  using Releaser = std::function<void(void* data, size_t capacity_bytes)>;
  // Plain aligned heap memory; kResourceExhausted if the allocation fails.
  static absl::StatusOr<std::shared_ptr<Buffer>> Allocate(size_t size_bytes);
  // Takes ownership of `data`, which `releaser` frees.
  Buffer(void* data, size_t size_bytes, size_t capacity_bytes, Releaser releaser);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t size_bytes() const { return size_bytes_; }
  size_t capacity_bytes() const { return capacity_bytes_; }

 private:
  void* data_;
  size_t size_bytes_;
  size_t capacity_bytes_;
  Releaser releaser_;
};

// Raw aligned allocation helpers shared by Buffer and BufferPool. Never returns null for success:
// size 0 allocates one alignment unit so empty tensors still have a valid pointer.
void* AlignedAllocate(size_t bytes);
void AlignedFree(void* data);

class Tensor {
 public:
  Tensor() = default;  // An empty slot: dtype undefined, no buffer.
  Tensor(DataType dtype, Shape shape, std::shared_ptr<Buffer> buffer, int64_t num_elements);

  // Allocates zero-filled heap memory (not pooled). Errors on bad shapes or allocation failure.
  static absl::StatusOr<Tensor> Allocate(DataType dtype, Shape shape);
  // Convenience for tests and constants: copies `values` into a new tensor of matching size.
  template <typename T>
  static absl::StatusOr<Tensor> FromVector(Shape shape, absl::Span<const T> values,
                                           DataType dtype = DataTypeOf<T>::value);

  bool defined() const { return buffer_ != nullptr; }
  DataType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(size_t i) const { return shape_[i]; }
  int64_t num_elements() const { return num_elements_; }
  size_t byte_size() const { return static_cast<size_t>(num_elements_) * ElementSize(dtype_); }
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }

  const void* raw_data() const { return buffer_ ? buffer_->data() : nullptr; }
  void* mutable_raw_data() { return buffer_ ? buffer_->data() : nullptr; }
  // Typed access. The caller has checked dtype (kernels dispatch on dtype first).
  template <typename T>
  const T* data() const { return static_cast<const T*>(raw_data()); }
  template <typename T>
  T* mutable_data() { return static_cast<T*>(mutable_raw_data()); }

  // Same buffer, new shape. Precondition: ElementCount(shape) == num_elements().
  Tensor Reshaped(Shape shape) const;

  std::string DebugString() const;  // "float[2,3]"

 private:
  DataType dtype_ = DataType::kUndefined;
  Shape shape_;
  int64_t num_elements_ = 0;
  std::shared_ptr<Buffer> buffer_;
};

template <typename T>
absl::StatusOr<Tensor> Tensor::FromVector(Shape shape, absl::Span<const T> values, DataType dtype) {
  auto tensor = Allocate(dtype, std::move(shape));
  if (!tensor.ok()) return tensor.status();
  if (static_cast<int64_t>(values.size()) != tensor->num_elements() ||
      sizeof(T) != ElementSize(dtype)) {
    return absl::InvalidArgumentError("FromVector: value count or element size does not match");
  }
  std::copy(values.begin(), values.end(), tensor->template mutable_data<T>());
  return tensor;
}

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_CORE_TENSOR_H_
