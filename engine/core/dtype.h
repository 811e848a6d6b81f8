// Element types of engine tensors. Values equal onnx::TensorProto_DataType so conversion is a cast.
#ifndef TRAIND_ENGINE_CORE_DTYPE_H_
#define TRAIND_ENGINE_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace traind::engine {

enum class DataType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUint8 = 2,
  kInt8 = 3,
  kUint16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,  // Known so errors can name it; the engine stores no strings.
  kBool = 9,    // Stored as one uint8_t per element holding 0 or 1.
  kFloat16 = 10,
  kFloat64 = 11,
  kUint32 = 12,
  kUint64 = 13,
  kComplex64 = 14,   // Not supported.
  kComplex128 = 15,  // Not supported.
  kBFloat16 = 16,
};

// IEEE half and bfloat16 are storage-only types: kernels that support them convert through float.
struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
float Float16ToFloat(Float16 h);
Float16 FloatToFloat16(float f);  // Round to nearest even.
float BFloat16ToFloat(BFloat16 h);
BFloat16 FloatToBFloat16(float f);  // Round to nearest even.

// True for every type a Tensor can hold (everything but undefined, string and complex).
bool IsStorableType(DataType type);
// Bytes per element; 0 for types that cannot be stored.
size_t ElementSize(DataType type);
// ONNX spelling, e.g. "float", "int64", "bool".
std::string DataTypeName(DataType type);
// Validates an ONNX TensorProto data_type value; kUnimplemented for known-but-unsupported types.
absl::StatusOr<DataType> DataTypeFromOnnx(int32_t onnx_type);

// Compile-time map from C++ element type to DataType. Bool tensors use uint8_t storage, so
// `DataTypeOf<uint8_t>` is kUint8; kernels that handle bool say so explicitly.
template <typename T>
struct DataTypeOf;
template <> struct DataTypeOf<float> { static constexpr DataType value = DataType::kFloat32; };
template <> struct DataTypeOf<double> { static constexpr DataType value = DataType::kFloat64; };
template <> struct DataTypeOf<int8_t> { static constexpr DataType value = DataType::kInt8; };
template <> struct DataTypeOf<int16_t> { static constexpr DataType value = DataType::kInt16; };
template <> struct DataTypeOf<int32_t> { static constexpr DataType value = DataType::kInt32; };
template <> struct DataTypeOf<int64_t> { static constexpr DataType value = DataType::kInt64; };
template <> struct DataTypeOf<uint8_t> { static constexpr DataType value = DataType::kUint8; };
template <> struct DataTypeOf<uint16_t> { static constexpr DataType value = DataType::kUint16; };
template <> struct DataTypeOf<uint32_t> { static constexpr DataType value = DataType::kUint32; };
template <> struct DataTypeOf<uint64_t> { static constexpr DataType value = DataType::kUint64; };
template <> struct DataTypeOf<Float16> { static constexpr DataType value = DataType::kFloat16; };
template <> struct DataTypeOf<BFloat16> { static constexpr DataType value = DataType::kBFloat16; };

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_CORE_DTYPE_H_
