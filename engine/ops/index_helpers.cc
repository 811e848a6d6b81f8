#include "engine/ops/index_helpers.h"

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace traind::engine {

DataType CopyTypeOf(DataType dtype) {
  switch (ElementSize(dtype)) {
    case 1: return DataType::kUint8;
    case 2: return DataType::kUint16;
    case 4: return DataType::kUint32;
    case 8: return DataType::kUint64;
    default: return DataType::kUndefined;
  }
}

absl::StatusOr<std::vector<int64_t>> ReadIndexVector(const Tensor& tensor, absl::string_view what) {
  if (tensor.rank() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be a 1-D tensor, got ", tensor.DebugString()));
  }
  std::vector<int64_t> values;
  TRAIND_RETURN_IF_ERROR(DispatchIndexType(tensor, what, [&](auto tag) {
    using I = typename decltype(tag)::type;
    const I* data = tensor.data<I>();
    values.assign(data, data + tensor.num_elements());
    return absl::OkStatus();
  }));
  return values;
}

absl::StatusOr<int64_t> ReadIndexScalar(const Tensor& tensor, absl::string_view what) {
  if (tensor.num_elements() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must hold exactly one element, got ", tensor.DebugString()));
  }
  int64_t value = 0;
  TRAIND_RETURN_IF_ERROR(DispatchIndexType(tensor, what, [&](auto tag) {
    using I = typename decltype(tag)::type;
    value = static_cast<int64_t>(*tensor.data<I>());
    return absl::OkStatus();
  }));
  return value;
}

absl::Status IndexOutOfRange(absl::string_view what, int64_t index, int64_t dim) {
  return absl::InvalidArgumentError(absl::StrCat(what, " index ", index,
                                                 " is out of range for a dim of size ", dim));
}

std::vector<int64_t> RowMajorStrides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return strides;
}

}  // namespace traind::engine
