#include "engine/model/tensor_proto.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/external_tensor.h"

namespace traind::engine {
namespace {

// Copies a repeated proto field into `out`, converting each value with a static_cast (the ONNX
// spec stores small integer types and bools widened to int32, and float16 bit patterns likewise).
template <typename Dst, typename Field>
void CopyWidened(const Field& field, void* out) {
  Dst* dst = static_cast<Dst*>(out);
  for (int i = 0; i < field.size(); ++i) dst[i] = static_cast<Dst>(field.Get(i));
}

}  // namespace

absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& proto, int64_t max_elements) {
  const std::string label = proto.name().empty() ? std::string("<unnamed>") : proto.name();
  if (proto.data_location() == onnx::TensorProto::EXTERNAL && !IsPinnedExternal(proto)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", label, "': external data was not resolved by the loader"));
  }
  if (proto.has_segment()) {
    return absl::UnimplementedError(absl::StrCat("tensor '", label, "': segments are unsupported"));
  }
  auto dtype_or = DataTypeFromOnnx(proto.data_type());
  if (!dtype_or.ok()) {
    return absl::Status(dtype_or.status().code(),
                        absl::StrCat("tensor '", label, "': ", dtype_or.status().message()));
  }
  const DataType dtype = *dtype_or;
  Shape shape(proto.dims().begin(), proto.dims().end());
  auto count_or = ElementCount(shape, max_elements);
  if (!count_or.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", label, "': ", count_or.status().message()));
  }
  const int64_t count = *count_or;
  const size_t bytes = static_cast<size_t>(count) * ElementSize(dtype);
  // Data the loader left in its file (LoadOptions::map_external_data) is mapped, not copied.
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) return LoadPinnedTensor(proto, dtype, shape, count);
  TRAIND_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Allocate(dtype, shape));

  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", label, "': raw_data has ", proto.raw_data().size(),
                       " bytes but dims ", ShapeToString(shape), " of ", DataTypeName(dtype),
                       " need ", bytes));
    }
    // Little-endian host assumed (x86-64, aarch64), as is ONNX's raw_data.
    if (bytes > 0) std::memcpy(tensor.mutable_raw_data(), proto.raw_data().data(), bytes);
    if (dtype == DataType::kBool) {
      // Normalise so every bool byte is 0 or 1 (kernels rely on it).
      uint8_t* values = tensor.mutable_data<uint8_t>();
      for (int64_t i = 0; i < count; ++i) values[i] = values[i] != 0;
    }
    return tensor;
  }

  auto check_size = [&](int field_size, const char* field_name) -> absl::Status {
    if (field_size != count) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", label, "': ", field_name, " has ",
                                                     field_size, " values but dims ",
                                                     ShapeToString(shape), " need ", count));
    }
    return absl::OkStatus();
  };
  void* out = tensor.mutable_raw_data();
  switch (dtype) {
    case DataType::kFloat32:
      TRAIND_RETURN_IF_ERROR(check_size(proto.float_data_size(), "float_data"));
      CopyWidened<float>(proto.float_data(), out);
      break;
    case DataType::kFloat64:
      TRAIND_RETURN_IF_ERROR(check_size(proto.double_data_size(), "double_data"));
      CopyWidened<double>(proto.double_data(), out);
      break;
    case DataType::kInt64:
      TRAIND_RETURN_IF_ERROR(check_size(proto.int64_data_size(), "int64_data"));
      CopyWidened<int64_t>(proto.int64_data(), out);
      break;
    case DataType::kUint32:
      TRAIND_RETURN_IF_ERROR(check_size(proto.uint64_data_size(), "uint64_data"));
      CopyWidened<uint32_t>(proto.uint64_data(), out);
      break;
    case DataType::kUint64:
      TRAIND_RETURN_IF_ERROR(check_size(proto.uint64_data_size(), "uint64_data"));
      CopyWidened<uint64_t>(proto.uint64_data(), out);
      break;
    case DataType::kInt32:
      TRAIND_RETURN_IF_ERROR(check_size(proto.int32_data_size(), "int32_data"));
      CopyWidened<int32_t>(proto.int32_data(), out);
      break;
    case DataType::kInt16:
      TRAIND_RETURN_IF_ERROR(check_size(proto.int32_data_size(), "int32_data"));
      CopyWidened<int16_t>(proto.int32_data(), out);
      break;
    case DataType::kInt8:
      TRAIND_RETURN_IF_ERROR(check_size(proto.int32_data_size(), "int32_data"));
      CopyWidened<int8_t>(proto.int32_data(), out);
      break;
    case DataType::kUint16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      TRAIND_RETURN_IF_ERROR(check_size(proto.int32_data_size(), "int32_data"));
      CopyWidened<uint16_t>(proto.int32_data(), out);
      break;
    case DataType::kUint8:
      TRAIND_RETURN_IF_ERROR(check_size(proto.int32_data_size(), "int32_data"));
      CopyWidened<uint8_t>(proto.int32_data(), out);
      break;
    case DataType::kBool: {
      TRAIND_RETURN_IF_ERROR(check_size(proto.int32_data_size(), "int32_data"));
      uint8_t* values = static_cast<uint8_t*>(out);
      for (int i = 0; i < proto.int32_data_size(); ++i) values[i] = proto.int32_data(i) != 0;
      break;
    }
    default:
      return absl::UnimplementedError(
          absl::StrCat("tensor '", label, "': unsupported dtype ", DataTypeName(dtype)));
  }
  return tensor;
}

onnx::TensorProto TensorToProto(const Tensor& tensor, const std::string& name) {
  onnx::TensorProto proto;
  proto.set_name(name);
  proto.set_data_type(static_cast<int32_t>(tensor.dtype()));
  for (int64_t dim : tensor.shape()) proto.add_dims(dim);
  proto.set_raw_data(static_cast<const char*>(tensor.raw_data()), tensor.byte_size());
  return proto;
}

}  // namespace traind::engine
