// Sum and Mean of any number of inputs with numpy broadcasting (opset 8+; opset 6/7 required equal
// shapes, a special case). One BroadcastPlan over all inputs; each output row is written from
// input 0 and then accumulates one input at a time, so every loop is contiguous (or a broadcast
// scalar) and vectorises. Mean divides once at the end.
#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_rule.h"
#include "engine/core/status_macros.h"
#include "engine/ops/broadcast.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {
namespace {

class SumMeanKernel final : public Kernel {
 public:
  SumMeanKernel(const char* name, bool mean, int num_inputs) : name_(name), mean_(mean), fn_(mean, num_inputs) {}

  // Two or more inputs (one is an alias of it, nothing to fuse).
  const ElementwiseFloatFn* elementwise_float() const override { return fn_.arity() >= 2 ? &fn_ : nullptr; }

  absl::Status Compute(KernelContext& context) const override {
    std::vector<const Tensor*> inputs;
    std::vector<const Shape*> shapes;
    for (int i = 0; i < context.num_inputs(); ++i) {
      TRAIND_ASSIGN_OR_RETURN(const Tensor* input, context.RequiredInput(i));
      if (!inputs.empty() && input->dtype() != inputs[0]->dtype()) {
        return absl::InvalidArgumentError(absl::StrCat(name_, ": inputs differ in dtype"));
      }
      inputs.push_back(input);
      shapes.push_back(&input->shape());
    }
    if (inputs.empty()) return absl::InvalidArgumentError(absl::StrCat(name_, ": no inputs"));
    return DispatchAmong<TRAIND_FLOAT_TYPES>(inputs[0]->dtype(), name_, [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      if (inputs.size() == 1) {
        context.SetOutput(0, *inputs[0]);  // Sum and mean of one tensor: itself (aliased).
        return absl::OkStatus();
      }
      TRAIND_ASSIGN_OR_RETURN(BroadcastPlan plan, BroadcastPlan::Make(shapes));
      TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, inputs[0]->dtype(), plan.output_shape()));
      T* out = y->mutable_data<T>();
      const T count = static_cast<T>(inputs.size());
      plan.ForEachRow(context.threads(), [&](int64_t out_offset, const int64_t* offsets, int64_t n) {
        T* dst = out + out_offset;
        // dst = in0 + in1, then += in2, ...: BinaryRow handles each input's 0/1 stride.
        BinaryRow(inputs[0]->data<T>() + offsets[0], plan.inner_stride(0), inputs[1]->data<T>() + offsets[1],
                  plan.inner_stride(1), dst, n, [](T a, T b) { return a + b; });
        for (size_t k = 2; k < inputs.size(); ++k) {
          BinaryRow(static_cast<const T*>(dst), 1, inputs[k]->data<T>() + offsets[k], plan.inner_stride(k), dst, n,
                    [](T a, T b) { return a + b; });
        }
        if (mean_) {
          for (int64_t i = 0; i < n; ++i) dst[i] /= count;  // Divide, as numpy.mean does.
        }
      });
      return absl::OkStatus();
    });
  }

 private:
  // Compute's sums for the fusion: in0 + in1, then + in2, ..., then / count for Mean, in that order.
  class Fn final : public ElementwiseFloatFn {
   public:
    Fn(bool mean, int arity) : mean_(mean), arity_(arity) {}
    int arity() const override { return arity_; }
    void Apply(const float* const* inputs, const bool* broadcast, int64_t n, float* out) const override {
      BinaryRow(inputs[0], broadcast[0] ? 0 : 1, inputs[1], broadcast[1] ? 0 : 1, out, n,
                [](float a, float b) { return a + b; });
      for (int k = 2; k < arity_; ++k) {
        BinaryRow(static_cast<const float*>(out), 1, inputs[k], broadcast[k] ? 0 : 1, out, n,
                  [](float a, float b) { return a + b; });
      }
      if (mean_) {
        const float count = static_cast<float>(arity_);
        for (int64_t i = 0; i < n; ++i) out[i] /= count;
      }
    }

   private:
    bool mean_;
    int arity_;
  };

  const char* name_;
  bool mean_;
  Fn fn_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateSumKernel(const KernelInit& init) {
  return std::unique_ptr<Kernel>(new SumMeanKernel("Sum", /*mean=*/false, init.num_inputs()));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateMeanKernel(const KernelInit& init) {
  return std::unique_ptr<Kernel>(new SumMeanKernel("Mean", /*mean=*/true, init.num_inputs()));
}

// Sum: each input receives dy, summed back over the dims it was broadcast along.
absl::Status SumGradient(GradientRuleContext& g) {
  for (int i = 0; i < g.num_inputs(); ++i) {
    if (g.NeedsGI(i)) TRAIND_RETURN_IF_ERROR(g.ReduceToShapeOf(g.GO(0), g.O(0), g.I(i), g.GI(i)));
  }
  return absl::OkStatus();
}

// Mean of n inputs: each receives dy / n, summed back over its broadcast dims.
absl::Status MeanGradient(GradientRuleContext& g) {
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.O(0)));
  const std::string share = g.Temp("dy_over_n");
  g.Emit("Div", {g.GO(0), g.ScalarConstant(g.num_inputs(), type)}, {share});
  for (int i = 0; i < g.num_inputs(); ++i) {
    if (g.NeedsGI(i)) TRAIND_RETURN_IF_ERROR(g.ReduceToShapeOf(share, g.O(0), g.I(i), g.GI(i)));
  }
  return absl::OkStatus();
}

}  // namespace traind::engine
