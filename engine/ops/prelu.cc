// PRelu: y = x < 0 ? slope * x : x, with the slope broadcast to X.
//
// Opset 7+ broadcasts the slope unidirectionally (numpy rules, the result has X's shape). Opset 6
// predates that: a slope of C values is per channel (axis 1), which is what legacy PyTorch exports
// rely on; that case is reshaped to [C, 1, ..., 1] and then broadcast the same way.
#include <memory>

#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_rule.h"
#include "engine/core/status_macros.h"
#include "engine/ops/broadcast.h"
#include "engine/ops/elementwise.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {
namespace {

struct PReluOp {
  template <typename T>
  T operator()(T x, T slope) const {
    return x < T(0) ? WrapMul(x, slope) : x;
  }
};

class PReluKernel final : public Kernel {
 public:
  explicit PReluKernel(bool per_channel_slope) : per_channel_slope_(per_channel_slope) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* slope, context.RequiredInput(1));
    if (x->dtype() != slope->dtype()) {
      return absl::InvalidArgumentError("PRelu: X and slope dtypes differ");
    }
    Shape slope_shape = slope->shape();
    if (per_channel_slope_ && slope->rank() == 1 && x->rank() >= 2 && slope->dim(0) != 1 &&
        slope->dim(0) == x->dim(1)) {
      slope_shape.resize(static_cast<size_t>(x->rank() - 1), 1);
    }
    const Shape* shapes[] = {&x->shape(), &slope_shape};
    TRAIND_ASSIGN_OR_RETURN(BroadcastPlan plan, BroadcastPlan::Make(shapes));
    if (plan.output_shape() != x->shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("PRelu: slope ", slope->DebugString(), " does not broadcast to X ", x->DebugString()));
    }
    return DispatchAmong<TRAIND_FLOAT_TYPES, int32_t, int64_t, uint32_t, uint64_t>(
        x->dtype(), "PRelu", [&](auto tag) -> absl::Status {
          using T = typename decltype(tag)::type;
          TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
          BinaryBroadcast(plan, x->data<T>(), slope->data<T>(), y->mutable_data<T>(), context.threads(), PReluOp{});
          return absl::OkStatus();
        });
  }

 private:
  bool per_channel_slope_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreatePReluKernel(const KernelInit& init) {
  return std::unique_ptr<Kernel>(new PReluKernel(/*per_channel_slope=*/init.opset() < 7));
}

// PRelu(x, slope) (opset 7+ broadcasting): dx = dy where x > 0, dy * slope elsewhere; dslope = dy * x where
// x <= 0, summed to slope's shape.
absl::Status PReluGradient(GradientRuleContext& g) {
  if (g.opset() < 7) return absl::UnimplementedError("PRelu gradients need opset 7 or later");
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  const std::string positive = g.Temp("positive"), zeros = g.Temp("zeros");
  g.Emit("Greater", {g.I(0), g.ScalarConstant(0.0, type)}, {positive});
  g.Emit("Mul", {g.GO(0), g.ScalarConstant(0.0, type)}, {zeros});
  if (g.NeedsGI(0)) {
    const std::string scaled = g.Temp("slope_dy"), selected = g.Temp("selected");
    g.Emit("Mul", {g.GO(0), g.I(1)}, {scaled});
    g.Emit("Where", {positive, g.GO(0), scaled}, {selected});
    TRAIND_RETURN_IF_ERROR(g.ReduceToShapeOf(selected, g.O(0), g.I(0), g.GI(0)));
  }
  if (g.NeedsGI(1)) {
    const std::string product = g.Temp("x_dy"), selected = g.Temp("selected");
    g.Emit("Mul", {g.GO(0), g.I(0)}, {product});
    g.Emit("Where", {positive, zeros, product}, {selected});
    TRAIND_RETURN_IF_ERROR(g.ReduceToShapeOf(selected, g.O(0), g.I(1), g.GI(1)));
  }
  return absl::OkStatus();
}

}  // namespace traind::engine
