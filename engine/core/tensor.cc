#include "engine/core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"

namespace traind::engine {

void* AlignedAllocate(size_t bytes) {
  // aligned_alloc needs a size that is a multiple of the alignment.
  size_t rounded = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  if (rounded == 0) rounded = kTensorAlignment;
  return std::aligned_alloc(kTensorAlignment, rounded);
}

void AlignedFree(void* data) { std::free(data); }

Buffer::Buffer(void* data, size_t size_bytes, size_t capacity_bytes, Releaser releaser)
    : data_(data),
      size_bytes_(size_bytes),
      capacity_bytes_(capacity_bytes),
      releaser_(std::move(releaser)) {}

Buffer::~Buffer() {
  if (releaser_) releaser_(data_, capacity_bytes_);
}

absl::StatusOr<std::shared_ptr<Buffer>> Buffer::Allocate(size_t size_bytes) {
  void* data = AlignedAllocate(size_bytes);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", size_bytes, " bytes"));
  }
  return std::make_shared<Buffer>(data, size_bytes, size_bytes,
                                  [](void* ptr, size_t) { AlignedFree(ptr); });
}

Tensor::Tensor(DataType dtype, Shape shape, std::shared_ptr<Buffer> buffer, int64_t num_elements)
    : dtype_(dtype), shape_(std::move(shape)), num_elements_(num_elements),
      buffer_(std::move(buffer)) {}

absl::StatusOr<Tensor> Tensor::Allocate(DataType dtype, Shape shape) {
  if (!IsStorableType(dtype)) {
    return absl::UnimplementedError(absl::StrCat("unsupported dtype ", DataTypeName(dtype)));
  }
  auto count = ElementCount(shape);
  if (!count.ok()) return count.status();
  const size_t bytes = static_cast<size_t>(*count) * ElementSize(dtype);
  auto buffer = Buffer::Allocate(bytes);
  if (!buffer.ok()) return buffer.status();
  std::memset((*buffer)->data(), 0, bytes);
  return Tensor(dtype, std::move(shape), *std::move(buffer), *count);
}

Tensor Tensor::Reshaped(Shape shape) const {
  return Tensor(dtype_, std::move(shape), buffer_, num_elements_);
}

std::string Tensor::DebugString() const {
  return absl::StrCat(DataTypeName(dtype_), ShapeToString(shape_));
}

}  // namespace traind::engine
