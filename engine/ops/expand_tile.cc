// Replicating ops: Expand (numpy broadcast of the input to a shape given at run time) and Tile
// (repeat the whole tensor along each dim). Both only copy, so they dispatch on element width.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_rule.h"
#include "engine/core/status_macros.h"
#include "engine/ops/broadcast.h"
#include "engine/ops/index_helpers.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {
namespace {

class ExpandKernel final : public Kernel {
 public:
  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* shape_tensor, context.RequiredInput(1));
    if (shape_tensor->dtype() != DataType::kInt64) {
      return absl::InvalidArgumentError("Expand: shape must be an int64 tensor");
    }
    TRAIND_ASSIGN_OR_RETURN(const Shape target, ReadIndexVector(*shape_tensor, "Expand shape"));
    for (int64_t dim : target) {
      if (dim < 0) {
        return absl::InvalidArgumentError(absl::StrCat("Expand: negative dim in shape ",
                                                       ShapeToString(target)));
      }
    }
    // Bidirectional: a 1 in `target` keeps the input's dim (so the output may exceed `target`).
    const Shape* shapes[] = {&x->shape(), &target};
    TRAIND_ASSIGN_OR_RETURN(BroadcastPlan plan, BroadcastPlan::Make(shapes));
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), plan.output_shape()));
    return DispatchByWidth(x->dtype(), "Expand", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* in = x->data<T>();
      T* out = y->mutable_data<T>();
      const int64_t in_stride = plan.inner_stride(0);
      plan.ForEachRow(context.threads(), [&](int64_t out_offset, const int64_t* offsets,
                                             int64_t n) {
        const T* src = in + offsets[0];
        T* dst = out + out_offset;
        if (in_stride == 1) {
          std::copy(src, src + n, dst);
        } else {
          std::fill(dst, dst + n, *src);
        }
      });
      return absl::OkStatus();
    });
  }
};

class TileKernel final : public Kernel {
 public:
  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* repeats_tensor, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const std::vector<int64_t> repeats,
                            ReadIndexVector(*repeats_tensor, "Tile repeats"));
    const int64_t rank = x->rank();
    if (static_cast<int64_t>(repeats.size()) != rank) {
      return absl::InvalidArgumentError(absl::StrCat("Tile: ", repeats.size(),
                                                     " repeats for input ", x->DebugString()));
    }
    Shape out_shape(rank);
    for (int64_t d = 0; d < rank; ++d) {
      if (repeats[d] < 0) {
        return absl::InvalidArgumentError(absl::StrCat("Tile: negative repeat ", repeats[d]));
      }
      if (!CheckedMul(x->dim(d), repeats[d], &out_shape[d])) {
        return absl::InvalidArgumentError("Tile: output shape overflows");
      }
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), out_shape));
    if (y->num_elements() == 0) return absl::OkStatus();
    if (rank == 0) {
      std::memcpy(y->mutable_raw_data(), x->raw_data(), x->byte_size());
      return absl::OkStatus();
    }
    const std::vector<int64_t> in_strides = RowMajorStrides(x->shape());
    const int64_t in_row = x->dim(rank - 1);
    const int64_t out_row = out_shape[rank - 1];
    const int64_t rows = y->num_elements() / out_row;
    return DispatchByWidth(x->dtype(), "Tile", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* in = x->data<T>();
      T* out = y->mutable_data<T>();
      // Each output row is the matching input row (output coordinates modulo input dims)
      // repeated along the last dim.
      context.threads().ParallelFor(
          rows, std::max<int64_t>(1, kParallelElementThreshold / out_row),
          [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
              int64_t offset = 0;
              int64_t rest = r;
              for (int64_t d = rank - 2; d >= 0; --d) {
                offset += (rest % out_shape[d] % x->dim(d)) * in_strides[d];
                rest /= out_shape[d];
              }
              const T* src = in + offset;
              T* dst = out + r * out_row;
              for (int64_t copy = 0; copy < repeats[rank - 1]; ++copy) {
                std::copy(src, src + in_row, dst + copy * in_row);
              }
            }
          });
      return absl::OkStatus();
    });
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateExpandKernel(const KernelInit&) {
  return std::unique_ptr<Kernel>(new ExpandKernel());
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateTileKernel(const KernelInit& init) {
  if (init.num_inputs() != 2) {
    return init.Error("Tile takes exactly two inputs, input and repeats");
  }
  return std::unique_ptr<Kernel>(new TileKernel());
}

// Expand: dy summed back over the broadcast dims.
absl::Status ExpandGradient(GradientRuleContext& g) {
  if (g.NeedsGI(0)) TRAIND_RETURN_IF_ERROR(g.ReduceToShapeOf(g.GO(0), g.O(0), g.I(0), g.GI(0)));
  return absl::OkStatus();
}

// Tile: dy viewed as [r0, d0, r1, d1, ...] and summed over the repeat axes.
absl::Status TileGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  std::optional<std::vector<int64_t>> repeats = g.ConstantInts(g.I(1));
  if (!repeats.has_value()) return absl::UnimplementedError("Tile gradients need constant repeats");
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> shape, g.StaticShape(g.I(0)));
  std::vector<int64_t> interleaved, repeat_axes;
  for (size_t d = 0; d < shape.size(); ++d) {
    repeat_axes.push_back(static_cast<int64_t>(interleaved.size()));
    interleaved.push_back((*repeats)[d]);
    interleaved.push_back(shape[d]);
  }
  const std::string viewed = g.Temp("tiles"), summed = g.Temp("summed");
  g.Emit("Reshape", {g.GO(0), g.Int64Constant(interleaved)}, {viewed});
  GradientRuleContext::SetIntAttr(g.Emit("ReduceSum", {viewed, g.Int64Constant(repeat_axes)}, {summed}), "keepdims", 0);
  g.Emit("Identity", {summed}, {g.GI(0)});
  return absl::OkStatus();
}

}  // namespace traind::engine
