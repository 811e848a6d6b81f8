// Broadcasting binary elementwise ops: arithmetic (Add Sub Mul Div Pow), variadic Min/Max,
// comparisons (Equal Less Greater LessOrEqual GreaterOrEqual) and logic (And Or Xor).
#include <cmath>
#include <limits>

#include "engine/autodiff/gradient_rule.h"
#include "engine/ops/elementwise.h"

namespace traind::engine {
namespace {

struct AddOp {
  template <typename T> T operator()(T a, T b) const { return WrapAdd(a, b); }
};
struct SubOp {
  template <typename T> T operator()(T a, T b) const { return WrapSub(a, b); }
};
struct MulOp {
  template <typename T> T operator()(T a, T b) const { return WrapMul(a, b); }
};
struct DivOp {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      // Integer division by zero (and INT_MIN / -1) trap on x86; ONNX leaves them undefined, so
      // the engine returns 0 and the wrapped negation instead of crashing.
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<T>) {
        if (b == -1) return WrapNeg(a);
      }
      return static_cast<T>(a / b);
    } else {
      return a / b;
    }
  }
};
// Numpy semantics: NaN in either input propagates.
struct MinOp {
  template <typename T> T operator()(T a, T b) const { return (a != a || a < b) ? a : b; }
};
struct MaxOp {
  template <typename T> T operator()(T a, T b) const { return (a != a || a > b) ? a : b; }
};
struct EqualOp {
  template <typename T> bool operator()(T a, T b) const { return a == b; }
};
struct LessOp {
  template <typename T> bool operator()(T a, T b) const { return a < b; }
};
struct GreaterOp {
  template <typename T> bool operator()(T a, T b) const { return a > b; }
};
struct LessOrEqualOp {
  template <typename T> bool operator()(T a, T b) const { return a <= b; }
};
struct GreaterOrEqualOp {
  template <typename T> bool operator()(T a, T b) const { return a >= b; }
};
struct AndOp {
  uint8_t operator()(uint8_t a, uint8_t b) const { return a & b; }  // Bools are 0/1.
};
struct OrOp {
  uint8_t operator()(uint8_t a, uint8_t b) const { return a | b; }
};
struct XorOp {
  uint8_t operator()(uint8_t a, uint8_t b) const { return a ^ b; }
};

// Converts a double to an integer type, saturating (NaN -> 0): a plain cast of an out-of-range
// double is undefined behaviour.
template <typename T>
T SaturatingCast(double value) {
  if (value != value) return 0;
  if (value <= static_cast<double>(std::numeric_limits<T>::lowest())) {
    return std::numeric_limits<T>::lowest();
  }
  if (value >= static_cast<double>(std::numeric_limits<T>::max())) {
    return std::numeric_limits<T>::max();
  }
  return static_cast<T>(value);
}

template <typename X, typename Y>
X PowValue(X base, Y exponent) {
  if constexpr (std::is_integral_v<X> && std::is_integral_v<Y>) {
    // Exact integer power by squaring, wrapping on overflow like the other integer ops.
    if (exponent < 0) return base == 1 ? 1 : (base == -1 ? (exponent % 2 ? -1 : 1) : 0);
    X result = 1;
    X factor = base;
    for (auto e = exponent; e > 0; e /= 2) {
      if (e % 2) result = WrapMul(result, factor);
      factor = WrapMul(factor, factor);
    }
    return result;
  } else if constexpr (std::is_integral_v<X>) {
    return SaturatingCast<X>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
  } else if constexpr (std::is_same_v<X, float> && std::is_same_v<Y, float>) {
    return std::pow(base, exponent);
  } else {
    return static_cast<X>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
  }
}

// Pow: base and exponent may have different dtypes (opset 12+); output has the base's dtype.
// Opset 6 (Pow-1) broadcasts by the legacy rules.
class PowKernel final : public Kernel {
 public:
  explicit PowKernel(LegacyBroadcast legacy) : legacy_(legacy) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* y, context.RequiredInput(1));
    Shape y_shape = y->shape();
    if (legacy_.active()) {
      TRAIND_ASSIGN_OR_RETURN(y_shape, legacy_.AlignB(x->shape(), y->shape()));
    }
    const Shape* shapes[] = {&x->shape(), &y_shape};
    TRAIND_ASSIGN_OR_RETURN(BroadcastPlan plan, BroadcastPlan::Make(shapes));
    return DispatchAmong<float, double, int32_t, int64_t>(
        x->dtype(), "Pow", [&](auto x_tag) -> absl::Status {
          using X = typename decltype(x_tag)::type;
          return DispatchAmong<float, double, int32_t, int64_t>(
              y->dtype(), "Pow exponent", [&](auto y_tag) -> absl::Status {
                using Y = typename decltype(y_tag)::type;
                TRAIND_ASSIGN_OR_RETURN(Tensor * out,
                                        context.AllocateOutput(0, x->dtype(), plan.output_shape()));
                BinaryBroadcast(plan, x->data<X>(), y->data<Y>(), out->mutable_data<X>(),
                                context.threads(), [](X a, Y b) { return PowValue(a, b); });
                return absl::OkStatus();
              });
        });
  }

 private:
  LegacyBroadcast legacy_;
};

// Min/Max over 1..N inputs, folded pairwise (each step broadcasts; before opset 8 the inputs
// must all have one shape).
template <typename Op>
class VariadicKernel final : public Kernel {
 public:
  VariadicKernel(const char* name, bool broadcasts) : name_(name), broadcasts_(broadcasts) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* first, context.RequiredInput(0));
    Tensor accumulated = *first;  // Shares the buffer; never written (each step allocates).
    for (int i = 1; i < context.num_inputs(); ++i) {
      TRAIND_ASSIGN_OR_RETURN(const Tensor* next, context.RequiredInput(i));
      if (next->dtype() != accumulated.dtype()) {
        return absl::InvalidArgumentError(absl::StrCat(name_, ": input dtypes differ"));
      }
      if (!broadcasts_ && next->shape() != first->shape()) {
        return absl::InvalidArgumentError(absl::StrCat(
            name_, ": inputs ", first->DebugString(), " and ", next->DebugString(),
            " differ in shape (no broadcasting before opset 8)"));
      }
      const Shape* shapes[] = {&accumulated.shape(), &next->shape()};
      TRAIND_ASSIGN_OR_RETURN(BroadcastPlan plan, BroadcastPlan::Make(shapes));
      TRAIND_ASSIGN_OR_RETURN(
          Tensor result, context.buffers().AllocateTensor(next->dtype(), plan.output_shape()));
      TRAIND_RETURN_IF_ERROR(DispatchAmong<TRAIND_NUMERIC_TYPES>(
          next->dtype(), name_, [&](auto tag) -> absl::Status {
            using T = typename decltype(tag)::type;
            BinaryBroadcast(plan, accumulated.data<T>(), next->data<T>(),
                            result.mutable_data<T>(), context.threads(), Op{});
            return absl::OkStatus();
          }));
      accumulated = std::move(result);
    }
    if (context.num_inputs() == 1) {
      // Still check the dtype so a single-input Max of an unsupported type is reported.
      TRAIND_RETURN_IF_ERROR(DispatchAmong<TRAIND_NUMERIC_TYPES>(
          first->dtype(), name_, [](auto) { return absl::OkStatus(); }));
    }
    context.SetOutput(0, std::move(accumulated));
    return absl::OkStatus();
  }

 private:
  const char* name_;
  bool broadcasts_;
};

template <typename KernelType, typename... Args>
absl::StatusOr<std::unique_ptr<Kernel>> Make(Args... args) {
  return std::unique_ptr<Kernel>(new KernelType(args...));
}

}  // namespace

// Every factory parses the legacy broadcast attributes, which only opset < 7 nodes have.
#define TRAIND_DEFINE_BINARY(OpName, Functor, kBoolOutput, ...)                        \
  absl::StatusOr<std::unique_ptr<Kernel>> Create##OpName##Kernel(const KernelInit& init) { \
    TRAIND_ASSIGN_OR_RETURN(LegacyBroadcast legacy, LegacyBroadcast::FromNode(init));    \
    return Make<BinaryKernel<Functor, kBoolOutput, __VA_ARGS__>>(#OpName, legacy);      \
  }

TRAIND_DEFINE_BINARY(Add, AddOp, false, TRAIND_NUMERIC_TYPES)
TRAIND_DEFINE_BINARY(Sub, SubOp, false, TRAIND_NUMERIC_TYPES)
TRAIND_DEFINE_BINARY(Mul, MulOp, false, TRAIND_NUMERIC_TYPES)
TRAIND_DEFINE_BINARY(Div, DivOp, false, TRAIND_NUMERIC_TYPES)
TRAIND_DEFINE_BINARY(Equal, EqualOp, true, TRAIND_NUMERIC_TYPES, BoolType)
TRAIND_DEFINE_BINARY(Less, LessOp, true, TRAIND_NUMERIC_TYPES)
TRAIND_DEFINE_BINARY(Greater, GreaterOp, true, TRAIND_NUMERIC_TYPES)
TRAIND_DEFINE_BINARY(LessOrEqual, LessOrEqualOp, true, TRAIND_NUMERIC_TYPES)
TRAIND_DEFINE_BINARY(GreaterOrEqual, GreaterOrEqualOp, true, TRAIND_NUMERIC_TYPES)
TRAIND_DEFINE_BINARY(And, AndOp, false, BoolType)
TRAIND_DEFINE_BINARY(Or, OrOp, false, BoolType)
TRAIND_DEFINE_BINARY(Xor, XorOp, false, BoolType)
#undef TRAIND_DEFINE_BINARY

absl::StatusOr<std::unique_ptr<Kernel>> CreatePowKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(LegacyBroadcast legacy, LegacyBroadcast::FromNode(init));
  return Make<PowKernel>(legacy);
}
absl::StatusOr<std::unique_ptr<Kernel>> CreateMinKernel(const KernelInit& init) {
  return Make<VariadicKernel<MinOp>>("Min", init.opset() >= 8);
}
absl::StatusOr<std::unique_ptr<Kernel>> CreateMaxKernel(const KernelInit& init) {
  return Make<VariadicKernel<MaxOp>>("Max", init.opset() >= 8);
}

// Gradients. Broadcast inputs get the output gradient summed back to their own shape.

absl::Status AddGradient(GradientRuleContext& g) {
  for (int i = 0; i < 2; ++i) {
    if (g.NeedsGI(i)) TRAIND_RETURN_IF_ERROR(g.ReduceToShapeOf(g.GO(0), g.O(0), g.I(i), g.GI(i)));
  }
  return absl::OkStatus();
}

absl::Status SubGradient(GradientRuleContext& g) {
  if (g.NeedsGI(0)) TRAIND_RETURN_IF_ERROR(g.ReduceToShapeOf(g.GO(0), g.O(0), g.I(0), g.GI(0)));
  if (g.NeedsGI(1)) {
    const std::string negated = g.Temp("neg");
    g.Emit("Neg", {g.GO(0)}, {negated});
    TRAIND_RETURN_IF_ERROR(g.ReduceToShapeOf(negated, g.O(0), g.I(1), g.GI(1)));
  }
  return absl::OkStatus();
}

// d(a*b) = b*dy for a, a*dy for b.
absl::Status MulGradient(GradientRuleContext& g) {
  for (int i = 0; i < 2; ++i) {
    if (!g.NeedsGI(i)) continue;
    const std::string product = g.Temp("mul");
    g.Emit("Mul", {g.GO(0), g.I(1 - i)}, {product});
    TRAIND_RETURN_IF_ERROR(g.ReduceToShapeOf(product, g.O(0), g.I(i), g.GI(i)));
  }
  return absl::OkStatus();
}

// y = a / b: da = dy / b, db = -dy * y / b.
absl::Status DivGradient(GradientRuleContext& g) {
  if (g.NeedsGI(0)) {
    const std::string quotient = g.Temp("dy_over_b");
    g.Emit("Div", {g.GO(0), g.I(1)}, {quotient});
    TRAIND_RETURN_IF_ERROR(g.ReduceToShapeOf(quotient, g.O(0), g.I(0), g.GI(0)));
  }
  if (g.NeedsGI(1)) {
    const std::string scaled = g.Temp("dy_y"), ratio = g.Temp("dy_y_over_b"), negated = g.Temp("neg");
    g.Emit("Mul", {g.GO(0), g.O(0)}, {scaled});
    g.Emit("Div", {scaled, g.I(1)}, {ratio});
    g.Emit("Neg", {ratio}, {negated});
    TRAIND_RETURN_IF_ERROR(g.ReduceToShapeOf(negated, g.O(0), g.I(1), g.GI(1)));
  }
  return absl::OkStatus();
}

// y = a ^ b: da = dy * b * a^(b-1), db = dy * y * ln(a).
absl::Status PowGradient(GradientRuleContext& g) {
  if (g.NeedsGI(0)) {
    TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
    const std::string exponent = g.Temp("b_minus_1"), power = g.Temp("a_pow"), slope = g.Temp("slope"),
                      scaled = g.Temp("dy_slope");
    g.Emit("Sub", {g.I(1), g.ScalarConstant(1.0, type)}, {exponent});
    g.Emit("Pow", {g.I(0), exponent}, {power});
    g.Emit("Mul", {power, g.I(1)}, {slope});
    g.Emit("Mul", {g.GO(0), slope}, {scaled});
    TRAIND_RETURN_IF_ERROR(g.ReduceToShapeOf(scaled, g.O(0), g.I(0), g.GI(0)));
  }
  if (g.NeedsGI(1)) {
    const std::string log_a = g.Temp("log_a"), scaled = g.Temp("dy_y"), product = g.Temp("dy_y_log_a");
    g.Emit("Log", {g.I(0)}, {log_a});
    g.Emit("Mul", {g.GO(0), g.O(0)}, {scaled});
    g.Emit("Mul", {scaled, log_a}, {product});
    TRAIND_RETURN_IF_ERROR(g.ReduceToShapeOf(product, g.O(0), g.I(1), g.GI(1)));
  }
  return absl::OkStatus();
}

// Max / Min (opset 8+, broadcasting): each input receives dy where it equals the result, shared among the inputs
// that tie (PyTorch's maximum/minimum split ties evenly), summed to its shape.
absl::Status ExtremumGradient(GradientRuleContext& g) {
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.O(0)));
  std::vector<std::string> masks;
  for (int i = 0; i < g.num_inputs(); ++i) {
    const std::string hit = g.Temp("is_result"), mask = g.Temp("mask");
    g.Emit("Equal", {g.I(i), g.O(0)}, {hit});
    GradientRuleContext::SetIntAttr(g.Emit("Cast", {hit}, {mask}), "to", type);
    masks.push_back(mask);
  }
  const std::string ties = g.Temp("ties");
  g.Emit("Sum", masks, {ties});
  for (int i = 0; i < g.num_inputs(); ++i) {
    if (!g.NeedsGI(i)) continue;
    const std::string share = g.Temp("share"), scaled = g.Temp("scaled");
    g.Emit("Div", {masks[i], ties}, {share});
    g.Emit("Mul", {g.GO(0), share}, {scaled});
    TRAIND_RETURN_IF_ERROR(g.ReduceToShapeOf(scaled, g.O(0), g.I(i), g.GI(i)));
  }
  return absl::OkStatus();
}

}  // namespace traind::engine
