#include "engine/core/tensor_bytes.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace traind::engine {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the wire format is little-endian, as is the engine");

absl::StatusOr<Tensor> TensorFromBytes(DataType dtype, absl::Span<const int64_t> dims, absl::string_view bytes,
                                       int64_t max_bytes, absl::string_view what, BufferPool* pool) {
  if (!IsStorableType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has dtype ", DataTypeName(dtype),
                                                   ", which a tensor cannot hold"));
  }
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has negative dimension ", dims[d], " at axis ", d));
    }
  }
  const int64_t element_size = static_cast<int64_t>(ElementSize(dtype));
  absl::StatusOr<int64_t> elements = ElementCount(dims);
  if (!elements.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has shape ", ShapeToString(dims),
                                                   ", whose element count overflows"));
  }
  if (*elements > max_bytes / element_size) {
    return absl::ResourceExhaustedError(absl::StrCat(what, " of shape ", ShapeToString(dims), " would take more than ",
                                                     max_bytes, " bytes"));
  }
  const int64_t expected = *elements * element_size;
  if (static_cast<int64_t>(bytes.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is ", DataTypeName(dtype), " ", ShapeToString(dims),
                                                   ": ", expected, " bytes expected, ", bytes.size(), " given"));
  }
  if (dtype == DataType::kBool) {
    for (size_t i = 0; i < bytes.size(); ++i) {
      if (static_cast<uint8_t>(bytes[i]) > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " is bool but byte ", i, " is ", static_cast<int>(static_cast<uint8_t>(bytes[i])),
                         " (bools are one byte, 0 or 1)"));
      }
    }
  }
  Shape shape(dims.begin(), dims.end());
  TRAIND_ASSIGN_OR_RETURN(Tensor tensor, pool != nullptr ? pool->AllocateTensor(dtype, std::move(shape))
                                                         : Tensor::Allocate(dtype, std::move(shape)));
  if (!bytes.empty()) std::memcpy(tensor.mutable_raw_data(), bytes.data(), bytes.size());
  return tensor;
}

std::string TensorToBytes(const Tensor& tensor) {
  if (!tensor.defined()) return std::string();
  return std::string(static_cast<const char*>(tensor.raw_data()), tensor.byte_size());
}

}  // namespace traind::engine
