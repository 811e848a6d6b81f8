// TopK: the k largest (or smallest) elements along an axis and their int64 indices.
//
// k is an attribute before opset 10 and a one-element int64 input from opset 10; `largest` and
// `sorted` exist from opset 11 (defaults 1). Equal values keep index order (the lower index comes
// first), as the spec requires. Results are always sorted, which also satisfies sorted = 0.
// NaN ranks above every number for largest and below for smallest (numpy/torch put NaN last in
// ascending order), so the order is a strict weak ordering even with NaNs.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_rule.h"
#include "engine/core/status_macros.h"
#include "engine/ops/axis_split.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {
namespace {

template <typename T>
bool IsNanValue(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(x);
  } else {
    return false;
  }
}

class TopKKernel final : public Kernel {
 public:
  TopKKernel(std::optional<int64_t> attribute_k, int64_t axis, bool largest)
      : attribute_k_(attribute_k), axis_(axis), largest_(largest) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(axis_, x->rank()));
    int64_t k;
    if (attribute_k_) {
      k = *attribute_k_;
    } else {
      TRAIND_ASSIGN_OR_RETURN(const Tensor* k_tensor, context.RequiredInput(1));
      if (k_tensor->dtype() != DataType::kInt64 || k_tensor->num_elements() != 1) {
        return absl::InvalidArgumentError("TopK: K must be a one-element int64 tensor");
      }
      k = *k_tensor->data<int64_t>();
    }
    const AxisSplit split = SplitAtAxis(x->shape(), axis);
    if (k < 0 || k > split.axis_dim) {
      return absl::InvalidArgumentError(absl::StrCat("TopK: k = ", k, " is outside [0, ", split.axis_dim, "] for ",
                                                     x->DebugString(), " along axis ", axis));
    }
    Shape out_shape = x->shape();
    out_shape[axis] = k;
    return DispatchAmong<TRAIND_NUMERIC_TYPES>(x->dtype(), "TopK", [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      TRAIND_ASSIGN_OR_RETURN(Tensor * values, context.AllocateOutput(0, x->dtype(), out_shape));
      TRAIND_ASSIGN_OR_RETURN(Tensor * indices, context.AllocateOutput(1, DataType::kInt64, out_shape));
      if (k == 0 || values->num_elements() == 0) return absl::OkStatus();
      const T* in = x->data<T>();
      T* out_values = values->mutable_data<T>();
      int64_t* out_indices = indices->mutable_data<int64_t>();
      const int64_t n = split.axis_dim;
      const int64_t inner = split.inner;
      const bool largest = largest_;
      context.threads().ParallelFor(split.outer * inner, RowsPerChunk(n, kParallelElementThreshold / 4),
                                    [&](int64_t begin, int64_t end) {
                                      std::vector<int64_t> order(static_cast<size_t>(n));  // One scratch per chunk.
                                      for (int64_t line = begin; line < end; ++line) {
                                        const int64_t o = line / inner;
                                        const int64_t i = line % inner;
                                        const T* base = in + o * n * inner + i;
                                        // a before b: better value, or equal and lower index.
                                        auto before = [&](int64_t a, int64_t b) {
                                          const T va = base[a * inner];
                                          const T vb = base[b * inner];
                                          const bool nan_a = IsNanValue(va);
                                          const bool nan_b = IsNanValue(vb);
                                          if (nan_a || nan_b) {
                                            if (nan_a && nan_b) return a < b;
                                            return largest ? nan_a : nan_b;
                                          }
                                          if (va != vb) return largest ? va > vb : va < vb;
                                          return a < b;
                                        };
                                        std::iota(order.begin(), order.end(), int64_t{0});
                                        std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
                                        T* dst_values = out_values + o * k * inner + i;
                                        int64_t* dst_indices = out_indices + o * k * inner + i;
                                        for (int64_t j = 0; j < k; ++j) {
                                          dst_values[j * inner] = base[order[j] * inner];
                                          dst_indices[j * inner] = order[j];
                                        }
                                      }
                                    });
      return absl::OkStatus();
    });
  }

 private:
  std::optional<int64_t> attribute_k_;  // Opsets < 10.
  int64_t axis_;
  bool largest_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateTopKKernel(const KernelInit& init) {
  std::optional<int64_t> k;
  if (init.opset() < 10) {
    TRAIND_ASSIGN_OR_RETURN(k, init.GetInt("k", std::nullopt));
    if (*k < 0) return init.Error(absl::StrCat("attribute 'k' is ", *k, ", expected >= 0"));
  }
  TRAIND_ASSIGN_OR_RETURN(int64_t axis, init.GetInt("axis", -1));
  TRAIND_ASSIGN_OR_RETURN(int64_t largest, init.GetInt("largest", 1));
  TRAIND_ASSIGN_OR_RETURN(int64_t sorted, init.GetInt("sorted", 1));
  if ((largest != 0 && largest != 1) || (sorted != 0 && sorted != 1)) {
    return init.Error("attributes 'largest' and 'sorted' must be 0 or 1");
  }
  return std::unique_ptr<Kernel>(new TopKKernel(k, axis, largest == 1));
}

// Values: each selected element receives its output's gradient, the others none. The indices along the axis
// are distinct within a slice, so a plain ScatterElements (no reduction) places them. K and the Indices output
// are integers.
absl::Status TopKGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();  // Indices carry no gradient, so one reached Values.
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  const std::string shape = g.Temp("x_shape");
  g.Emit("Shape", {g.I(0)}, {shape});
  onnx::NodeProto* scatter = g.Emit("ScatterElements", {g.Zeros(shape, type), g.O(1), g.GO(0)}, {g.GI(0)});
  GradientRuleContext::SetIntAttr(scatter, "axis", g.IntAttr("axis", -1));
  return absl::OkStatus();
}

}  // namespace traind::engine
