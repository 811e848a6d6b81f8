// Tensor: dtype + shape + a shared, 64-byte-aligned CPU buffer. Copying a Tensor copies a
// shared_ptr, never the data. Invariant: buffer()->size_bytes() >= num_elements() * ElementSize.
// Several tensors may share one buffer (Reshape and friends alias their input); kernels never write
// into their inputs, so sharing is safe.
//
// A buffer may also have a copy in an accelerator's memory (a DeviceCopy, made by engine/gpu): the GPU executor
// keeps parameters, gradients and optimizer state there across steps. The buffer records which of its two copies
// is current, and every host access (data(), mutable_data()) first brings the host bytes up to date, so code that
// knows nothing of devices (checkpoints, CPU kernels, the server) always reads current values.
#ifndef TRAIND_ENGINE_CORE_TENSOR_H_
#define TRAIND_ENGINE_CORE_TENSOR_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/core/dtype.h"
#include "engine/core/shape.h"

namespace traind::engine {

inline constexpr size_t kTensorAlignment = 64;

class Buffer;

// The copy of a Buffer's bytes in an accelerator's memory (engine/gpu implements it).
class DeviceCopy {
 public:
  virtual ~DeviceCopy() = default;
  // Copies the device bytes into `host` (`bytes` of them) and returns when they are there.
  virtual absl::Status Download(void* host, size_t bytes) = 0;
  // Copies the device bytes into `destination`'s device copy on the same device, attaching one if it has none,
  // without going through the host; the destination is then current on the device only. False (nothing done)
  // when it cannot, e.g. the destination lives on another device.
  virtual absl::StatusOr<bool> CopyInto(Buffer& destination) = 0;
};

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

  // The host bytes, current: if only the device copy is, they are downloaded first (a buffer made on a device
  // gets its host memory then). A failed download (a lost device) aborts the process with a message; callers that
  // can report an error call SyncToHost() first.
  void* data() const {
    return device_copy_.load(std::memory_order_acquire) == nullptr ? data_ : CurrentHostData();
  }
  // The same, for writing: the device copy, if any, is stale from now on.
  void* mutable_data() {
    return device_copy_.load(std::memory_order_acquire) == nullptr ? data_ : HostDataForWriting();
  }
  size_t size_bytes() const { return size_bytes_; }
  size_t capacity_bytes() const { return capacity_bytes_; }

  // ---- Device copies (engine/gpu). Without one, a buffer is plain host memory and none of this costs anything.
  // A buffer whose bytes so far exist only in `copy`; host memory is allocated at the first host access.
  static std::shared_ptr<Buffer> CreateOnDevice(size_t size_bytes, std::unique_ptr<DeviceCopy> copy);
  // Null without one. Attached once, it stays until the buffer goes.
  DeviceCopy* device_copy() const { return device_copy_.load(std::memory_order_acquire); }
  // Attaches `copy` to a buffer that has none (false, and `copy` is kept by the caller, if one came first).
  // `device_current`: the copy already holds the buffer's bytes.
  bool AttachDeviceCopy(std::unique_ptr<DeviceCopy>& copy, bool device_current);
  bool host_current() const { return host_current_.load(std::memory_order_acquire); }
  bool device_current() const { return device_current_.load(std::memory_order_acquire); }
  // An upload made the device copy equal to the host bytes.
  void MarkDeviceCurrent();
  // The device copy was written: the host bytes are stale until the next host access downloads them.
  void MarkWrittenOnDevice();
  // Brings the host bytes up to date, reporting a failed download instead of aborting.
  absl::Status SyncToHost() const;

 private:
  void* CurrentHostData() const;
  void* HostDataForWriting();

  mutable void* data_;  // Null only for a buffer made on a device, until its first host access.
  size_t size_bytes_;
  size_t capacity_bytes_;
  Releaser releaser_;
  mutable bool owns_host_memory_ = false;  // Host memory allocated at a device buffer's first host access.
  std::atomic<DeviceCopy*> device_copy_{nullptr};  // Owned.
  mutable std::atomic<bool> host_current_{true};
  std::atomic<bool> device_current_{false};
  mutable std::mutex sync_mutex_;  // Serialises downloads and flag changes of a buffer with a device copy.
};

// Raw aligned allocation helpers shared by Buffer and BufferPool. Never returns null for success:
// size 0 allocates one alignment unit so empty tensors still have a valid pointer. Large buffers are mappings of
// their own (tensor.cc); AlignedFree must be given the size they were allocated with.
void* AlignedAllocate(size_t bytes);
void AlignedFree(void* data, size_t bytes);

// For the main() of a process that trains (the daemon, the benchmarks), before it starts threads: fixes glibc
// malloc's mmap threshold at its initial 128 KiB. By default malloc raises the threshold to the size of each large
// block freed (up to 32 MiB), and from then on serves such blocks from its heaps; oneDNN's GEMM takes packing
// buffers of a few MB from malloc inside every parallel region, so each worker thread's arena grew by their
// fragments and kept them: 23 MB of a LoRA step's 310 MB peak RSS on the BERT-size encoder (bench/train_bench,
// two layers). Blocks of 128 KiB and up are then mapped and unmapped per allocation (a few page faults per MB).
void ConfigureProcessAllocator();

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
  void* mutable_raw_data() { return buffer_ ? buffer_->mutable_data() : nullptr; }
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

// Copies `from`'s bytes into `to`'s buffer (same byte size, checked by the caller), so that every holder of `to`
// sees them; a no-op when both share a buffer. When `from` is current on a device, the copy stays on that device
// (a parameter updated by the GPU optimizer never crosses to the host).
absl::Status CopyTensorData(const Tensor& from, Tensor& to);

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
