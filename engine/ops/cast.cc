// Cast between every storable dtype (float16 and bfloat16 convert through float; bool is 0/1).
// Float to integer saturates (NaN -> 0): ONNX leaves out-of-range casts undefined, C++ makes them
// UB, so the engine picks the one well-defined answer.
#include <cmath>
#include <limits>

#include "engine/autodiff/gradient_rule.h"
#include "engine/ops/elementwise.h"

namespace traind::engine {
namespace {

template <typename T>
float ToFloatLike(T value) {
  if constexpr (std::is_same_v<T, Float16>) {
    return Float16ToFloat(value);
  } else {
    return BFloat16ToFloat(value);
  }
}

template <typename To, typename From>
To ConvertValue(From value) {
  if constexpr (std::is_same_v<From, Float16> || std::is_same_v<From, BFloat16>) {
    return ConvertValue<To>(ToFloatLike(value));
  } else if constexpr (std::is_same_v<To, Float16>) {
    return FloatToFloat16(static_cast<float>(value));
  } else if constexpr (std::is_same_v<To, BFloat16>) {
    return FloatToBFloat16(static_cast<float>(value));
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    if (value != value) return 0;
    if (value <= static_cast<From>(std::numeric_limits<To>::lowest())) {
      return std::numeric_limits<To>::lowest();
    }
    if (value >= static_cast<From>(std::numeric_limits<To>::max())) {
      return std::numeric_limits<To>::max();
    }
    return static_cast<To>(value);
  } else {
    return static_cast<To>(value);
  }
}

#define TRAIND_CAST_TYPES TRAIND_NUMERIC_TYPES, BoolType, Float16, BFloat16

// Output 0 = input 0 converted to `to_`; shared by Cast and CastLike.
absl::Status CastInputTo(KernelContext& context, DataType to_) {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    if (x->dtype() == to_) {
      context.SetOutput(0, *x);  // No-op cast: alias.
      return absl::OkStatus();
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, to_, x->shape()));
    return DispatchAmong<TRAIND_CAST_TYPES>(x->dtype(), "Cast", [&](auto from_tag) {
      using From = typename decltype(from_tag)::type;
      constexpr bool kFromBool = decltype(from_tag)::dtype == DataType::kBool;
      return DispatchAmong<TRAIND_CAST_TYPES>(to_, "Cast", [&](auto to_tag) {
        using To = typename decltype(to_tag)::type;
        constexpr bool kToBool = decltype(to_tag)::dtype == DataType::kBool;
        const From* in = x->data<From>();
        To* out = y->mutable_data<To>();
        context.threads().ParallelFor(
            x->num_elements(), kParallelElementThreshold, [&](int64_t begin, int64_t end) {
              for (int64_t i = begin; i < end; ++i) {
                if constexpr (kToBool) {
                  out[i] = ConvertValue<double>(in[i]) != 0.0;
                } else if constexpr (kFromBool) {
                  out[i] = ConvertValue<To>(static_cast<uint8_t>(in[i] != 0));
                } else {
                  out[i] = ConvertValue<To>(in[i]);
                }
              }
            });
        return absl::OkStatus();
      });
    });
}

class CastKernel final : public Kernel {
 public:
  explicit CastKernel(DataType to) : to_(to) {}

  absl::Status Compute(KernelContext& context) const override { return CastInputTo(context, to_); }

 private:
  DataType to_;
};

// CastLike (opset 15): the target dtype is that of the second input.
class CastLikeKernel final : public Kernel {
 public:
  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* like, context.RequiredInput(1));
    return CastInputTo(context, like->dtype());
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateCastKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int64_t to, init.GetInt("to", std::nullopt));
  if (to < 0 || to > 1000) return init.Error(absl::StrCat("invalid 'to' dtype ", to));
  auto dtype = DataTypeFromOnnx(static_cast<int32_t>(to));
  if (!dtype.ok()) {
    return dtype.status().code() == absl::StatusCode::kUnimplemented
               ? init.Unsupported(dtype.status().message())
               : init.Error(dtype.status().message());
  }
  return std::unique_ptr<Kernel>(new CastKernel(*dtype));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateCastLikeKernel(const KernelInit&) {
  return std::unique_ptr<Kernel>(new CastLikeKernel());
}

// Between floating types a cast passes the gradient, cast back to the input's type. (Casts to integer types
// carry no gradient: the builder never asks for one through them.)
absl::Status CastGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  GradientRuleContext::SetIntAttr(g.Emit("Cast", {g.GO(0)}, {g.GI(0)}), "to", type);
  return absl::OkStatus();
}

}  // namespace traind::engine
