// Clip (bounds from attributes before opset 11, from optional scalar inputs since) and Where
// (three-way broadcasting select).
#include "engine/ops/clip_where.h"

#include <limits>

#include "engine/autodiff/gradient_rule.h"
#include "engine/ops/elementwise.h"

namespace traind::engine {

absl::StatusOr<Shape> CheckWhereInputs(const Tensor& condition, const Tensor& x, const Tensor& y) {
  if (condition.dtype() != DataType::kBool || x.dtype() != y.dtype()) {
    return absl::InvalidArgumentError("Where: condition must be bool and X, Y one dtype");
  }
  const Shape* shapes[] = {&condition.shape(), &x.shape(), &y.shape()};
  return BroadcastShapes(shapes);
}

absl::Status CheckClipBound(const Tensor* bound, const Tensor& x) {
  if (bound != nullptr && (bound->dtype() != x.dtype() || bound->num_elements() != 1)) {
    return absl::InvalidArgumentError("Clip: min/max must be one-element tensors of X's dtype");
  }
  return absl::OkStatus();
}

namespace {

class ClipKernel final : public Kernel {
 public:
  // Before opset 11 the bounds are float attributes; afterwards they are inputs 1 and 2.
  ClipKernel(bool bounds_are_inputs, float attr_min, float attr_max)
      : bounds_are_inputs_(bounds_are_inputs), attr_min_(attr_min), attr_max_(attr_max) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    return DispatchAmong<TRAIND_NUMERIC_TYPES>(x->dtype(), "Clip", [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      T low = std::numeric_limits<T>::lowest();
      T high = std::numeric_limits<T>::max();
      if (bounds_are_inputs_) {
        TRAIND_RETURN_IF_ERROR(ReadBound<T>(context.input(1), *x, &low));
        TRAIND_RETURN_IF_ERROR(ReadBound<T>(context.input(2), *x, &high));
      } else {
        if constexpr (std::is_floating_point_v<T>) {
          low = static_cast<T>(attr_min_);
          high = static_cast<T>(attr_max_);
        }
      }
      TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
      const T* in = x->data<T>();
      T* out = y->mutable_data<T>();
      // max-then-min, so low > high yields high everywhere (numpy.clip, as the spec says).
      context.threads().ParallelFor(x->num_elements(), kParallelElementThreshold,
                                    [&](int64_t begin, int64_t end) {
                                      for (int64_t i = begin; i < end; ++i) {
                                        const T v = in[i] < low ? low : in[i];
                                        out[i] = v > high ? high : v;
                                      }
                                    });
      return absl::OkStatus();
    });
  }

 private:
  template <typename T>
  static absl::Status ReadBound(const Tensor* bound, const Tensor& x, T* value) {
    TRAIND_RETURN_IF_ERROR(CheckClipBound(bound, x));
    if (bound != nullptr) *value = *bound->data<T>();  // Omitted: keep the type's limit.
    return absl::OkStatus();
  }

  bool bounds_are_inputs_;
  float attr_min_;
  float attr_max_;
};

// Where copies elements, so it dispatches on element size only: one instantiation serves all
// dtypes of that width.
class WhereKernel final : public Kernel {
 public:
  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* condition, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* y, context.RequiredInput(2));
    TRAIND_RETURN_IF_ERROR(CheckWhereInputs(*condition, *x, *y).status());
    const Shape* shapes[] = {&condition->shape(), &x->shape(), &y->shape()};
    TRAIND_ASSIGN_OR_RETURN(BroadcastPlan plan, BroadcastPlan::Make(shapes));
    TRAIND_ASSIGN_OR_RETURN(Tensor * out, context.AllocateOutput(0, x->dtype(), plan.output_shape()));
    return DispatchAmong<uint8_t, uint16_t, uint32_t, uint64_t>(
        UnsignedOfSameSize(x->dtype()), "Where", [&](auto tag) -> absl::Status {
          using T = typename decltype(tag)::type;
          const uint8_t* c = condition->data<uint8_t>();
          const T* a = x->data<T>();
          const T* b = y->data<T>();
          T* o = out->mutable_data<T>();
          const int64_t sc = plan.inner_stride(0), sa = plan.inner_stride(1),
                        sb = plan.inner_stride(2);
          plan.ForEachRow(context.threads(), [&](int64_t base, const int64_t* offsets, int64_t n) {
            const uint8_t* cr = c + offsets[0];
            const T* ar = a + offsets[1];
            const T* br = b + offsets[2];
            T* orow = o + base;
            for (int64_t i = 0; i < n; ++i) orow[i] = cr[i * sc] ? ar[i * sa] : br[i * sb];
          });
          return absl::OkStatus();
        });
  }

 private:
  static DataType UnsignedOfSameSize(DataType dtype) {
    switch (ElementSize(dtype)) {
      case 1: return DataType::kUint8;
      case 2: return DataType::kUint16;
      case 4: return DataType::kUint32;
      case 8: return DataType::kUint64;
      default: return dtype;  // Unstorable: DispatchAmong reports it.
    }
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateClipKernel(const KernelInit& init) {
  const bool bounds_are_inputs = init.opset() >= 11;
  float min_value = std::numeric_limits<float>::lowest();
  float max_value = std::numeric_limits<float>::max();
  if (!bounds_are_inputs) {
    TRAIND_ASSIGN_OR_RETURN(min_value, init.GetFloat("min", min_value));
    TRAIND_ASSIGN_OR_RETURN(max_value, init.GetFloat("max", max_value));
  }
  return std::unique_ptr<Kernel>(new ClipKernel(bounds_are_inputs, min_value, max_value));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateWhereKernel(const KernelInit&) {
  return std::unique_ptr<Kernel>(new WhereKernel());
}

// Clip: dx = dy where min <= x <= max (bounds as inputs from opset 11, attributes before), else 0; a bound
// input receives dy where it clipped (x below min, or above max), summed to its shape.
absl::Status ClipGradient(GradientRuleContext& g) {
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  std::string low, high;
  if (g.opset() >= 11) {
    if (g.num_inputs() > 1) low = g.I(1);
    if (g.num_inputs() > 2) high = g.I(2);
  } else {
    low = g.ScalarConstant(g.FloatAttr("min", -3.4028234663852886e38f), type);
    high = g.ScalarConstant(g.FloatAttr("max", 3.4028234663852886e38f), type);
  }
  std::string passed = g.GO(0);
  const std::string zeros = g.Temp("zeros");
  g.Emit("Mul", {g.GO(0), g.ScalarConstant(0.0, type)}, {zeros});
  if (!g.NeedsGI(0) && !g.NeedsGI(1) && !g.NeedsGI(2)) return absl::OkStatus();
  if (!low.empty()) {
    const std::string inside = g.Temp("above_min"), out = g.Temp("clip_low");
    g.Emit("GreaterOrEqual", {g.I(0), low}, {inside});
    g.Emit("Where", {inside, passed, zeros}, {out});
    passed = out;
  }
  if (!high.empty()) {
    const std::string inside = g.Temp("below_max"), out = g.Temp("clip_high");
    g.Emit("LessOrEqual", {g.I(0), high}, {inside});
    g.Emit("Where", {inside, passed, zeros}, {out});
    passed = out;
  }
  if (g.NeedsGI(0)) g.Emit("Identity", {passed}, {g.GI(0)});
  for (int bound = 1; bound <= 2; ++bound) {
    if (!g.NeedsGI(bound)) continue;
    const std::string clipped = g.Temp("clipped"), selected = g.Temp("selected");
    g.Emit(bound == 1 ? "Less" : "Greater", {g.I(0), g.I(bound)}, {clipped});
    g.Emit("Where", {clipped, g.GO(0), zeros}, {selected});
    TRAIND_RETURN_IF_ERROR(g.ReduceToShapeOf(selected, g.O(0), g.I(bound), g.GI(bound)));
  }
  return absl::OkStatus();
}

// Where(c, a, b): da = dy where c, db = dy where not c, each summed to its input's shape.
absl::Status WhereGradient(GradientRuleContext& g) {
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.O(0)));
  const std::string zeros = g.Temp("zeros");
  g.Emit("Mul", {g.GO(0), g.ScalarConstant(0.0, type)}, {zeros});
  for (int i = 1; i <= 2; ++i) {
    if (!g.NeedsGI(i)) continue;
    const std::string selected = g.Temp("selected");
    g.Emit("Where", {g.I(0), i == 1 ? g.GO(0) : zeros, i == 1 ? zeros : g.GO(0)}, {selected});
    TRAIND_RETURN_IF_ERROR(g.ReduceToShapeOf(selected, g.O(0), g.I(i), g.GI(i)));
  }
  return absl::OkStatus();
}

}  // namespace traind::engine
