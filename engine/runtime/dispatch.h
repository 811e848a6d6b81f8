// Dtype dispatch for kernels: call a generic lambda with the C++ storage type of a runtime dtype.
//
//   return DispatchAmong<float, double, int32_t>(x.dtype(), "Relu", [&](auto tag) {
//     using T = typename decltype(tag)::type;
//     ...; return absl::OkStatus();
//   });
//
// A dtype outside the list yields kUnimplemented ("unsupported dtype ..."), which the backend test
// runner reports as a SKIP. Use BoolType in a list for ONNX bool (stored as uint8_t 0/1).
#ifndef TRAIND_ENGINE_RUNTIME_DISPATCH_H_
#define TRAIND_ENGINE_RUNTIME_DISPATCH_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/core/dtype.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

struct BoolType {};

template <typename T>
struct TypeTag {
  using type = T;
  static constexpr DataType dtype = DataTypeOf<T>::value;
};
template <>
struct TypeTag<BoolType> {
  using type = uint8_t;
  static constexpr DataType dtype = DataType::kBool;
};

template <typename... Ts, typename Fn>
absl::Status DispatchAmong(DataType dtype, absl::string_view op, Fn&& fn) {
  absl::Status status = UnsupportedDtype(op, dtype);
  // Fold over the list; at most one entry matches.
  (void)((dtype == TypeTag<Ts>::dtype ? (status = fn(TypeTag<Ts>{}), true) : false) || ...);
  return status;
}

// Common lists, spelled out so call sites read as the ONNX type constraints do.
#define TRAIND_FLOAT_TYPES float, double
#define TRAIND_SIGNED_INT_TYPES int8_t, int16_t, int32_t, int64_t
#define TRAIND_UNSIGNED_INT_TYPES uint8_t, uint16_t, uint32_t, uint64_t
#define TRAIND_NUMERIC_TYPES TRAIND_FLOAT_TYPES, TRAIND_SIGNED_INT_TYPES, TRAIND_UNSIGNED_INT_TYPES

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_RUNTIME_DISPATCH_H_
