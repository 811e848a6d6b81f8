// CumSum (opsets 11, 14): running sums along the axis given by input 1 (an int32/int64 scalar or
// one-element 1-D tensor). `exclusive` shifts by one (the first output is 0); `reverse` sums from
// the end. Integer sums wrap (two's complement), like the other integer arithmetic in the engine.
#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_rule.h"
#include "engine/core/status_macros.h"
#include "engine/ops/axis_split.h"
#include "engine/ops/elementwise.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {
namespace {

absl::StatusOr<int64_t> ReadAxis(const Tensor& axis) {
  if (axis.num_elements() != 1 || axis.rank() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("CumSum: axis must be a scalar, got ", axis.DebugString()));
  }
  switch (axis.dtype()) {
    case DataType::kInt32:
      return *axis.data<int32_t>();
    case DataType::kInt64:
      return *axis.data<int64_t>();
    default:
      return UnsupportedDtype("CumSum axis", axis.dtype());
  }
}

class CumSumKernel final : public Kernel {
 public:
  CumSumKernel(bool exclusive, bool reverse) : exclusive_(exclusive), reverse_(reverse) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* axis_tensor, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(int64_t raw_axis, ReadAxis(*axis_tensor));
    TRAIND_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(raw_axis, x->rank()));
    const AxisSplit split = SplitAtAxis(x->shape(), axis);
    return DispatchAmong<float, double, int32_t, int64_t, uint32_t, uint64_t>(
        x->dtype(), "CumSum", [&](auto tag) -> absl::Status {
          using T = typename decltype(tag)::type;
          TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
          if (y->num_elements() == 0) return absl::OkStatus();
          const T* in = x->data<T>();
          T* out = y->mutable_data<T>();
          const int64_t n = split.axis_dim;
          const int64_t inner = split.inner;
          // Step `a` of the scan visits axis position a (or n - 1 - a when reversed). Each step
          // adds a whole row of `inner` elements, a contiguous vectorisable loop.
          const int64_t step = reverse_ ? -inner : inner;
          context.threads().ParallelFor(split.outer, RowsPerChunk(n * inner, kParallelElementThreshold),
                                        [&](int64_t begin, int64_t end) {
                                          for (int64_t o = begin; o < end; ++o) {
                                            const int64_t first = o * n * inner + (reverse_ ? (n - 1) * inner : 0);
                                            const T* src = in + first;
                                            T* dst = out + first;
                                            if (exclusive_) {
                                              for (int64_t i = 0; i < inner; ++i) dst[i] = T(0);
                                            } else {
                                              for (int64_t i = 0; i < inner; ++i) dst[i] = src[i];
                                            }
                                            for (int64_t a = 1; a < n; ++a) {
                                              const T* previous_out = dst;
                                              // Exclusive: out[a] = out[a-1] + x[a-1]; inclusive: out[a-1] + x[a].
                                              const T* addend = exclusive_ ? src : src + step;
                                              src += step;
                                              dst += step;
                                              for (int64_t i = 0; i < inner; ++i)
                                                dst[i] = WrapAdd(previous_out[i], addend[i]);
                                            }
                                          }
                                        });
          return absl::OkStatus();
        });
  }

 private:
  bool exclusive_;
  bool reverse_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateCumSumKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int64_t exclusive, init.GetInt("exclusive", 0));
  TRAIND_ASSIGN_OR_RETURN(int64_t reverse, init.GetInt("reverse", 0));
  if ((exclusive != 0 && exclusive != 1) || (reverse != 0 && reverse != 1)) {
    return init.Error("attributes 'exclusive' and 'reverse' must be 0 or 1");
  }
  return std::unique_ptr<Kernel>(new CumSumKernel(exclusive == 1, reverse == 1));
}

// Each x[i] reaches the outputs at and after i (before i when reversed): dx is the cumulative sum of dy in the
// opposite direction, with the same exclusiveness. The axis input is an integer and has no gradient.
absl::Status CumSumGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  onnx::NodeProto* sum = g.Emit("CumSum", {g.GO(0), g.I(1)}, {g.GI(0)});
  GradientRuleContext::SetIntAttr(sum, "exclusive", g.IntAttr("exclusive", 0));
  GradientRuleContext::SetIntAttr(sum, "reverse", g.IntAttr("reverse", 0) == 0 ? 1 : 0);
  return absl::OkStatus();
}

}  // namespace traind::engine
