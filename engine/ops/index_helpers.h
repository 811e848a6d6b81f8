// Helpers shared by the data-movement ops (Gather*, Scatter*, Slice, Split, Pad, Tile, Expand,
// OneHot, ...): reading int32/int64 index and shape inputs, bounds-checked wrapping of negative
// indices, and the unsigned storage type that moves elements of any dtype by width.
#ifndef TRAIND_ENGINE_OPS_INDEX_HELPERS_H_
#define TRAIND_ENGINE_OPS_INDEX_HELPERS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "engine/core/tensor.h"
#include "engine/runtime/dispatch.h"

namespace traind::engine {

// The unsigned integer type of the same width as `dtype` (kUndefined for unstorable types), so
// that copy-only kernels instantiate once per width instead of once per dtype.
DataType CopyTypeOf(DataType dtype);

// Calls fn(TypeTag<U>) with U the unsigned type as wide as `dtype`; kUnimplemented otherwise.
template <typename Fn>
absl::Status DispatchByWidth(DataType dtype, absl::string_view op, Fn&& fn) {
  if (!IsStorableType(dtype)) return UnsupportedDtype(op, dtype);
  return DispatchAmong<uint8_t, uint16_t, uint32_t, uint64_t>(CopyTypeOf(dtype), op,
                                                              std::forward<Fn>(fn));
}

// Calls fn(TypeTag<I>) for an int32 or int64 index tensor; kInvalidArgument for other dtypes
// (ONNX type constraints allow only these two for indices).
template <typename Fn>
absl::Status DispatchIndexType(const Tensor& indices, absl::string_view what, Fn&& fn) {
  if (indices.dtype() != DataType::kInt32 && indices.dtype() != DataType::kInt64) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be int32 or int64, got ", DataTypeName(indices.dtype())));
  }
  return DispatchAmong<int32_t, int64_t>(indices.dtype(), what, std::forward<Fn>(fn));
}

// Reads a scalar or 1-D int32/int64 tensor (shapes, pads, starts, repeats, ...) as int64.
absl::StatusOr<std::vector<int64_t>> ReadIndexVector(const Tensor& tensor, absl::string_view what);

// Reads a one-element int32/int64 tensor (Trilu's k) as int64.
absl::StatusOr<int64_t> ReadIndexScalar(const Tensor& tensor, absl::string_view what);

// kInvalidArgument "<what> index 7 is out of range for a dim of size 3".
absl::Status IndexOutOfRange(absl::string_view what, int64_t index, int64_t dim);

// Maps index in [-dim, dim) to [0, dim); false when it is outside (the caller reports it).
inline bool WrapIndex(int64_t index, int64_t dim, int64_t* wrapped) {
  if (index < -dim || index >= dim) return false;
  *wrapped = index < 0 ? index + dim : index;
  return true;
}

// Checks every element of an index tensor against `dim` before any element is used, so kernels
// can then index without further checks.
template <typename I>
absl::Status CheckIndices(const I* indices, int64_t count, int64_t dim, absl::string_view what) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t index = static_cast<int64_t>(indices[i]);
    if (index < -dim || index >= dim) return IndexOutOfRange(what, index, dim);
  }
  return absl::OkStatus();
}

// Row-major element strides of `shape` (strides[last] == 1).
std::vector<int64_t> RowMajorStrides(const Shape& shape);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_INDEX_HELPERS_H_
