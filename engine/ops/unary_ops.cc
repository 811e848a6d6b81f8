// Unary elementwise ops: math (Sqrt Exp Log Erf Tanh Reciprocal Neg Abs), activations (Sigmoid
// Relu LeakyRelu Elu Selu Softplus) and Not. Attributes are parsed once in the factory.
#include <cmath>

#include "engine/autodiff/gradient_rule.h"
#include "engine/model/traind_schemas.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/fast_math.h"

namespace traind::engine {
namespace {

struct SqrtOp {
  template <typename T> T operator()(T x) const { return std::sqrt(x); }
};
// float Exp, Log, Tanh, Sigmoid, Elu, Selu and Softplus run fast_math.h's branch-free forms, which loops
// vectorise (glibc's expf / logf / tanhf are a call per element: 2.9 / 6.4 / 14.5 ms for a million elements at
// 2 threads); within a few ulp, same specials.
struct ExpOp {
  template <typename T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, float>) {
      return FastExpFullRange(x);
    } else {
      return std::exp(x);
    }
  }
};
struct LogOp {
  template <typename T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, float>) {
      return FastLog(x);
    } else {
      return std::log(x);
    }
  }
};
// e^x - 1, exact near 0 (e^x rounded, minus 1, would keep only the rounding there).
template <typename T>
T Expm1(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return FastExpm1(x);
  } else {
    return std::expm1(x);
  }
}
struct ErfOp {
  template <typename T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, float>) {
      return FastErf(x);
    } else {
      return std::erf(x);
    }
  }
};
struct TanhOp {
  template <typename T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, float>) {
      return FastTanh(x);
    } else {
      return std::tanh(x);
    }
  }
};
struct ReciprocalOp {
  template <typename T> T operator()(T x) const { return T(1) / x; }
};
struct NegOp {
  template <typename T> T operator()(T x) const { return WrapNeg(x); }
};
struct AbsOp {
  template <typename T>
  T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) {
      return x;
    } else {
      return x < T(0) ? WrapNeg(x) : x;
    }
  }
};
struct SigmoidOp {
  // Split by sign so exp never overflows.
  template <typename T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, float>) return FastSigmoid(x);
    if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
    const T e = std::exp(x);
    return e / (T(1) + e);
  }
};
struct ReluOp {
  template <typename T> T operator()(T x) const { return x > T(0) ? x : T(0); }
};
struct LeakyReluOp {
  float alpha;
  template <typename T> T operator()(T x) const { return x >= T(0) ? x : static_cast<T>(alpha) * x; }
};
struct EluOp {
  float alpha;
  template <typename T>
  T operator()(T x) const {
    const T negative_part = static_cast<T>(alpha) * Expm1(x);  // unconditionally, so the loop has no branch
    return x >= T(0) ? x : negative_part;
  }
};
struct SeluOp {
  float alpha;
  float gamma;
  template <typename T>
  T operator()(T x) const {
    const T negative_part = static_cast<T>(alpha) * Expm1(x);  // unconditionally, so the loop has no branch
    return static_cast<T>(gamma) * (x > T(0) ? x : negative_part);
  }
};
struct SoftplusOp {
  // log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow for large |x|.
  template <typename T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, float>) {
      return (x > 0.0f ? x : 0.0f) + FastLog1p(FastExpFullRange(-std::fabs(x)));
    } else {
      return (x > T(0) ? x : T(0)) + std::log1p(std::exp(-std::fabs(x)));
    }
  }
};
struct NotOp {
  uint8_t operator()(uint8_t x) const { return x ^ 1; }  // Bools are 0/1.
};

template <typename Op, typename... Ts>
absl::StatusOr<std::unique_ptr<Kernel>> MakeUnary(const char* name, Op op = Op{}) {
  return std::unique_ptr<Kernel>(new UnaryKernel<Op, Ts...>(name, op));
}

}  // namespace

#define TRAIND_DEFINE_UNARY(OpName, Functor, ...)                                      \
  absl::StatusOr<std::unique_ptr<Kernel>> Create##OpName##Kernel(const KernelInit&) { \
    return MakeUnary<Functor, __VA_ARGS__>(#OpName);                                    \
  }

TRAIND_DEFINE_UNARY(Sqrt, SqrtOp, TRAIND_FLOAT_TYPES)
TRAIND_DEFINE_UNARY(Exp, ExpOp, TRAIND_FLOAT_TYPES)
TRAIND_DEFINE_UNARY(Log, LogOp, TRAIND_FLOAT_TYPES)
TRAIND_DEFINE_UNARY(Erf, ErfOp, TRAIND_FLOAT_TYPES)
TRAIND_DEFINE_UNARY(Tanh, TanhOp, TRAIND_FLOAT_TYPES)
TRAIND_DEFINE_UNARY(Reciprocal, ReciprocalOp, TRAIND_FLOAT_TYPES)
TRAIND_DEFINE_UNARY(Sigmoid, SigmoidOp, TRAIND_FLOAT_TYPES)
TRAIND_DEFINE_UNARY(Softplus, SoftplusOp, TRAIND_FLOAT_TYPES)
TRAIND_DEFINE_UNARY(Neg, NegOp, TRAIND_FLOAT_TYPES, TRAIND_SIGNED_INT_TYPES)
TRAIND_DEFINE_UNARY(Abs, AbsOp, TRAIND_NUMERIC_TYPES)
TRAIND_DEFINE_UNARY(Relu, ReluOp, TRAIND_FLOAT_TYPES, TRAIND_SIGNED_INT_TYPES)
TRAIND_DEFINE_UNARY(Not, NotOp, BoolType)
#undef TRAIND_DEFINE_UNARY

absl::StatusOr<std::unique_ptr<Kernel>> CreateLeakyReluKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(float alpha, init.GetFloat("alpha", 0.01f));
  return MakeUnary<LeakyReluOp, TRAIND_FLOAT_TYPES>("LeakyRelu", LeakyReluOp{alpha});
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateEluKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(float alpha, init.GetFloat("alpha", 1.0f));
  return MakeUnary<EluOp, TRAIND_FLOAT_TYPES>("Elu", EluOp{alpha});
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSeluKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(float alpha, init.GetFloat("alpha", 1.67326319217681884765625f));
  TRAIND_ASSIGN_OR_RETURN(float gamma, init.GetFloat("gamma", 1.05070102214813232421875f));
  return MakeUnary<SeluOp, TRAIND_FLOAT_TYPES>("Selu", SeluOp{alpha, gamma});
}

// Gradients.

// dx = dy where x > 0, else 0.
absl::Status ReluGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  // One fused pass (engine/ops/activation_grad.cc): dx = x > 0 ? dy : 0, read off Relu's output y (y > 0 exactly
  // where x > 0), as PyTorch does: x then has no reader in the backward pass, so it is freed after the forward
  // Relu, and an elementwise x (a residual Add) fuses into the Relu.
  g.Emit("ReluGrad", {g.GO(0), g.O(0)}, {g.GI(0)})->set_domain(kTraindTrainingDomain);
  return absl::OkStatus();
}

// dx = dy * (1 - y^2).
absl::Status TanhGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  const std::string squared = g.Temp("y2");
  g.Emit("Mul", {g.O(0), g.O(0)}, {squared});
  const std::string slope = g.Temp("slope");
  g.Emit("Sub", {g.ScalarConstant(1.0, type), squared}, {slope});
  g.Emit("Mul", {g.GO(0), slope}, {g.GI(0)});
  return absl::OkStatus();
}

absl::Status NegGradient(GradientRuleContext& g) {
  if (g.NeedsGI(0)) g.Emit("Neg", {g.GO(0)}, {g.GI(0)});
  return absl::OkStatus();
}

namespace {

// GI(0) = GO(0) * factor.
void EmitScaled(GradientRuleContext& g, const std::string& factor) { g.Emit("Mul", {g.GO(0), factor}, {g.GI(0)}); }

// A float 0/1 mask of `condition` (a bool value) in the forward input's type.
absl::StatusOr<std::string> Mask(GradientRuleContext& g, const std::string& condition) {
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  const std::string mask = g.Temp("mask");
  GradientRuleContext::SetIntAttr(g.Emit("Cast", {condition}, {mask}), "to", type);
  return mask;
}

}  // namespace

// dx = dy * y * (1 - y).
absl::Status SigmoidGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  const std::string one_minus = g.Temp("one_minus_y");
  g.Emit("Sub", {g.ScalarConstant(1.0, type), g.O(0)}, {one_minus});
  const std::string slope = g.Temp("slope");
  g.Emit("Mul", {g.O(0), one_minus}, {slope});
  EmitScaled(g, slope);
  return absl::OkStatus();
}

// dx = dy * y.
absl::Status ExpGradient(GradientRuleContext& g) {
  if (g.NeedsGI(0)) EmitScaled(g, g.O(0));
  return absl::OkStatus();
}

// dx = dy / x.
absl::Status LogGradient(GradientRuleContext& g) {
  if (g.NeedsGI(0)) g.Emit("Div", {g.GO(0), g.I(0)}, {g.GI(0)});
  return absl::OkStatus();
}

// dx = dy / (2 y).
absl::Status SqrtGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  const std::string twice = g.Temp("two_y");
  g.Emit("Mul", {g.O(0), g.ScalarConstant(2.0, type)}, {twice});
  g.Emit("Div", {g.GO(0), twice}, {g.GI(0)});
  return absl::OkStatus();
}

// dx = dy * 2/sqrt(pi) * exp(-x^2).
absl::Status ErfGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  // One fused pass with a vectorised exp (engine/ops/activation_grad.cc).
  g.Emit("ErfGrad", {g.GO(0), g.I(0)}, {g.GI(0)})->set_domain(kTraindTrainingDomain);
  return absl::OkStatus();
}

// dx = -dy * y^2.
absl::Status ReciprocalGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  const std::string squared = g.Temp("y2");
  g.Emit("Mul", {g.O(0), g.O(0)}, {squared});
  const std::string scaled = g.Temp("dy_y2");
  g.Emit("Mul", {g.GO(0), squared}, {scaled});
  g.Emit("Neg", {scaled}, {g.GI(0)});
  return absl::OkStatus();
}

// dx = dy * sign(x) (0 at 0, as PyTorch).
absl::Status AbsGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  const std::string zero = g.ScalarConstant(0.0, type);
  const std::string positive = g.Temp("positive"), negative = g.Temp("negative");
  g.Emit("Greater", {g.I(0), zero}, {positive});
  g.Emit("Less", {g.I(0), zero}, {negative});
  TRAIND_ASSIGN_OR_RETURN(std::string positive_mask, Mask(g, positive));
  TRAIND_ASSIGN_OR_RETURN(std::string negative_mask, Mask(g, negative));
  const std::string sign = g.Temp("sign");
  g.Emit("Sub", {positive_mask, negative_mask}, {sign});
  EmitScaled(g, sign);
  return absl::OkStatus();
}

// dx = dy where x > 0, alpha * dy elsewhere.
absl::Status LeakyReluGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  const std::string positive = g.Temp("positive");
  g.Emit("Greater", {g.I(0), g.ScalarConstant(0.0, type)}, {positive});
  const std::string scaled = g.Temp("alpha_dy");
  g.Emit("Mul", {g.GO(0), g.ScalarConstant(g.FloatAttr("alpha", 0.01f), type)}, {scaled});
  g.Emit("Where", {positive, g.GO(0), scaled}, {g.GI(0)});
  return absl::OkStatus();
}

// dx = dy * sigmoid(x).
absl::Status SoftplusGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  const std::string sigmoid = g.Temp("sigmoid");
  g.Emit("Sigmoid", {g.I(0)}, {sigmoid});
  EmitScaled(g, sigmoid);
  return absl::OkStatus();
}

// Elu: dx = dy where x > 0, dy * (y + alpha) elsewhere (y = alpha * (e^x - 1) there).
absl::Status EluGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  const std::string positive = g.Temp("positive"), slope = g.Temp("slope"), scaled = g.Temp("scaled");
  g.Emit("Greater", {g.I(0), g.ScalarConstant(0.0, type)}, {positive});
  g.Emit("Add", {g.O(0), g.ScalarConstant(g.FloatAttr("alpha", 1.0f), type)}, {slope});
  g.Emit("Mul", {g.GO(0), slope}, {scaled});
  g.Emit("Where", {positive, g.GO(0), scaled}, {g.GI(0)});
  return absl::OkStatus();
}

// Selu: dx = gamma * dy where x > 0, dy * (y + gamma * alpha) elsewhere.
absl::Status SeluGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  const float alpha = g.FloatAttr("alpha", 1.67326319217681884765625f);
  const float gamma = g.FloatAttr("gamma", 1.05070102214813232421875f);
  const std::string positive = g.Temp("positive"), slope = g.Temp("slope"), negative_part = g.Temp("negative"),
                    positive_part = g.Temp("positive_part");
  g.Emit("Greater", {g.I(0), g.ScalarConstant(0.0, type)}, {positive});
  g.Emit("Add", {g.O(0), g.ScalarConstant(static_cast<double>(gamma) * alpha, type)}, {slope});
  g.Emit("Mul", {g.GO(0), slope}, {negative_part});
  g.Emit("Mul", {g.GO(0), g.ScalarConstant(gamma, type)}, {positive_part});
  g.Emit("Where", {positive, positive_part, negative_part}, {g.GI(0)});
  return absl::OkStatus();
}

}  // namespace traind::engine
