#include "engine/core/dtype.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace traind::engine {

float Float16ToFloat(Float16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1Fu;
  uint32_t mantissa = h.bits & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);  // Inf or NaN.
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // Signed zero.
  } else {
    // Subnormal half: normalise into a float.
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3FFu;
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

Float16 FloatToFloat16(float f) {
  // Algorithm of Maratyszcza's FP16 library: the two scalings make the FPU round the mantissa to
  // nearest even and saturate to infinity; NaN maps to a quiet NaN.
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
  uint32_t w;
  std::memcpy(&w, &f, sizeof(w));
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  const uint32_t bias_bits = (bias >> 1) + 0x07800000u;
  float bias_f;
  std::memcpy(&bias_f, &bias_bits, sizeof(bias_f));
  base = bias_f + base;
  uint32_t bits;
  std::memcpy(&bits, &base, sizeof(bits));
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return {static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign))};
}

float BFloat16ToFloat(BFloat16 h) {
  const uint32_t bits = static_cast<uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

BFloat16 FloatToBFloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return {static_cast<uint16_t>((bits >> 16) | 0x40u)};
  const uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return {static_cast<uint16_t>((bits + rounding_bias) >> 16)};
}

size_t ElementSize(DataType type) {
  switch (type) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kInt8: return 1;
    case DataType::kUint8: return 1;
    case DataType::kBool: return 1;
    case DataType::kInt16: return 2;
    case DataType::kUint16: return 2;
    case DataType::kFloat16: return 2;
    case DataType::kBFloat16: return 2;
    case DataType::kInt32: return 4;
    case DataType::kUint32: return 4;
    case DataType::kInt64: return 8;
    case DataType::kUint64: return 8;
    default: return 0;
  }
}

bool IsStorableType(DataType type) { return ElementSize(type) != 0; }

std::string DataTypeName(DataType type) {
  switch (type) {
    case DataType::kUndefined: return "undefined";
    case DataType::kFloat32: return "float";
    case DataType::kUint8: return "uint8";
    case DataType::kInt8: return "int8";
    case DataType::kUint16: return "uint16";
    case DataType::kInt16: return "int16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kString: return "string";
    case DataType::kBool: return "bool";
    case DataType::kFloat16: return "float16";
    case DataType::kFloat64: return "double";
    case DataType::kUint32: return "uint32";
    case DataType::kUint64: return "uint64";
    case DataType::kComplex64: return "complex64";
    case DataType::kComplex128: return "complex128";
    case DataType::kBFloat16: return "bfloat16";
  }
  return absl::StrCat("dtype#", static_cast<int32_t>(type));
}

absl::StatusOr<DataType> DataTypeFromOnnx(int32_t onnx_type) {
  if (onnx_type < 1 || onnx_type > 16) {
    return absl::InvalidArgumentError(absl::StrCat("invalid ONNX data type ", onnx_type));
  }
  const auto type = static_cast<DataType>(onnx_type);
  if (!IsStorableType(type)) {
    return absl::UnimplementedError(absl::StrCat("unsupported dtype ", DataTypeName(type)));
  }
  return type;
}

}  // namespace traind::engine
