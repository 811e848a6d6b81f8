// Slice (opsets 1-9: starts/ends/axes attributes; 10+: int32/int64 inputs with optional axes and
// steps, negative steps, clamping) and Split (opsets 2-12: `split` attribute; 13+: `split` input).
#include <algorithm>
#include <optional>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_rule.h"
#include "engine/core/status_macros.h"
#include "engine/ops/strided_copy.h"
#include "engine/ops/index_helpers.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {
namespace {

// One output dim of a slice: out[i] = in[start + i * step], i < count.
struct SliceDim {
  int64_t start = 0;
  int64_t step = 1;
  int64_t count = 0;
};

// The spec's clamping: negative starts/ends count from the end; then for step > 0 both clamp to
// [0, dim], for step < 0 start clamps to [0, dim - 1] and end to [-1, dim - 1]. Values such as
// INT64_MAX / INT64_MIN ("to the end") are common, so nothing here may overflow.
SliceDim ClampSlice(int64_t start, int64_t end, int64_t step, int64_t dim) {
  SliceDim slice;
  if (dim == 0) return slice;  // Nothing to select (and the clamp ranges below would be empty).
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    slice.count = end > start ? (end - start - 1) / step + 1 : 0;
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    // |INT64_MIN| is not representable; any magnitude >= dim selects one element anyway.
    const int64_t magnitude = step == std::numeric_limits<int64_t>::min() ? dim : -step;
    slice.count = start > end ? (start - end - 1) / magnitude + 1 : 0;
  }
  // With at most one element the step is irrelevant; 1 keeps offsets small and lets a full
  // one-element slice be recognised as the identity.
  slice.step = slice.count > 1 ? step : 1;
  slice.start = slice.count > 0 ? start : 0;
  return slice;
}

class SliceKernel final : public Kernel {
 public:
  // Opsets 1-9 carry the parameters as attributes (no steps); from 10 they are inputs.
  SliceKernel(bool params_are_inputs, std::vector<int64_t> starts, std::vector<int64_t> ends,
              std::vector<int64_t> axes)
      : params_are_inputs_(params_are_inputs), starts_(std::move(starts)), ends_(std::move(ends)),
        axes_(std::move(axes)) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    std::vector<int64_t> starts = starts_, ends = ends_, axes = axes_, steps;
    if (params_are_inputs_) {
      TRAIND_ASSIGN_OR_RETURN(const Tensor* starts_tensor, context.RequiredInput(1));
      TRAIND_ASSIGN_OR_RETURN(const Tensor* ends_tensor, context.RequiredInput(2));
      TRAIND_ASSIGN_OR_RETURN(starts, ReadIndexVector(*starts_tensor, "Slice starts"));
      TRAIND_ASSIGN_OR_RETURN(ends, ReadIndexVector(*ends_tensor, "Slice ends"));
      if (const Tensor* axes_tensor = context.input(3)) {
        TRAIND_ASSIGN_OR_RETURN(axes, ReadIndexVector(*axes_tensor, "Slice axes"));
      }
      if (const Tensor* steps_tensor = context.input(4)) {
        TRAIND_ASSIGN_OR_RETURN(steps, ReadIndexVector(*steps_tensor, "Slice steps"));
      }
    }
    const int64_t rank = x->rank();
    if (axes.empty() && !(params_are_inputs_ && context.input(3) != nullptr)) {
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    }
    if (steps.empty() && !(params_are_inputs_ && context.input(4) != nullptr)) {
      steps.assign(starts.size(), 1);
    }
    if (ends.size() != starts.size() || axes.size() != starts.size() ||
        steps.size() != starts.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Slice: starts, ends, axes and steps must have one length, got ", starts.size(), ", ",
          ends.size(), ", ", axes.size(), ", ", steps.size()));
    }
    std::vector<SliceDim> dims(rank);
    for (int64_t d = 0; d < rank; ++d) dims[d] = {0, 1, x->dim(d)};
    std::vector<bool> seen(rank, false);
    for (size_t i = 0; i < starts.size(); ++i) {
      TRAIND_ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(axes[i], rank));
      if (seen[axis]) return absl::InvalidArgumentError("Slice: axes repeat an axis");
      seen[axis] = true;
      if (steps[i] == 0) return absl::InvalidArgumentError("Slice: steps must not be 0");
      dims[axis] = ClampSlice(starts[i], ends[i], steps[i], x->dim(axis));
    }
    Shape out_shape(rank);
    bool identity = true;
    for (int64_t d = 0; d < rank; ++d) {
      out_shape[d] = dims[d].count;
      identity = identity && dims[d].step == 1 && dims[d].count == x->dim(d);
    }
    if (identity) {
      context.SetOutput(0, *x);  // Kernels never write inputs, so aliasing is safe.
      return absl::OkStatus();
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), out_shape));
    if (y->num_elements() == 0) return absl::OkStatus();
    const std::vector<int64_t> in_strides = RowMajorStrides(x->shape());
    int64_t base = 0;  // Input offset of output element 0.
    std::vector<int64_t> view_strides(rank);
    for (int64_t d = 0; d < rank; ++d) {
      base += dims[d].start * in_strides[d];
      view_strides[d] = dims[d].step * in_strides[d];
    }
    if (rank == 0) {
      std::memcpy(y->mutable_raw_data(), x->raw_data(), x->byte_size());
      return absl::OkStatus();
    }
    return DispatchByWidth(x->dtype(), "Slice", [&](auto tag) {
      using T = typename decltype(tag)::type;
      CopyStridedView(x->data<T>() + base, out_shape, view_strides, y->mutable_data<T>(), context.threads());
      return absl::OkStatus();
    });
  }

 private:
  bool params_are_inputs_;
  std::vector<int64_t> starts_;
  std::vector<int64_t> ends_;
  std::vector<int64_t> axes_;
};

class SplitKernel final : public Kernel {
 public:
  // `split` is the attribute (opsets 2-12); from 13 it comes from input 1.
  SplitKernel(int64_t axis, bool split_is_input, std::vector<int64_t> split)
      : axis_(axis), split_is_input_(split_is_input), split_(std::move(split)) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(axis_, x->rank()));
    const int64_t dim = x->dim(axis);
    const int64_t parts = context.num_outputs();
    std::vector<int64_t> split = split_;
    if (split_is_input_ && context.input(1) != nullptr) {
      TRAIND_ASSIGN_OR_RETURN(split, ReadIndexVector(*context.input(1), "Split split"));
    }
    if (split.empty()) {
      if (parts == 0 || dim % parts != 0) {
        return absl::InvalidArgumentError(absl::StrCat("Split: dim ", dim, " of ",
                                                       x->DebugString(), " does not split into ",
                                                       parts, " equal parts"));
      }
      split.assign(parts, dim / parts);
    }
    if (static_cast<int64_t>(split.size()) != parts) {
      return absl::InvalidArgumentError(absl::StrCat("Split: ", split.size(),
                                                     " split sizes for ", parts, " outputs"));
    }
    int64_t total = 0;
    for (int64_t size : split) {
      if (size < 0 || size > dim) {
        return absl::InvalidArgumentError(absl::StrCat("Split: invalid split size ", size));
      }
      total += size;  // <= parts * dim: no overflow.
    }
    if (total != dim) {
      return absl::InvalidArgumentError(absl::StrCat("Split: split sizes sum to ", total,
                                                     ", dim ", axis, " is ", dim));
    }
    const size_t element_size = ElementSize(x->dtype());
    const int64_t outer = DimProduct(x->shape(), 0, axis);
    const size_t inner_bytes =
        static_cast<size_t>(DimProduct(x->shape(), axis + 1, x->shape().size())) * element_size;
    const size_t in_row_bytes = static_cast<size_t>(dim) * inner_bytes;
    const char* in = static_cast<const char*>(x->raw_data());
    size_t column_offset = 0;  // Byte offset of the current part within an input row.
    for (int64_t p = 0; p < parts; ++p) {
      Shape shape = x->shape();
      shape[axis] = split[p];
      TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(p, x->dtype(), shape));
      const size_t row_bytes = static_cast<size_t>(split[p]) * inner_bytes;
      char* out = static_cast<char*>(y->mutable_raw_data());
      for (int64_t o = 0; o < outer && row_bytes > 0; ++o) {
        std::memcpy(out + o * row_bytes, in + o * in_row_bytes + column_offset, row_bytes);
      }
      column_offset += row_bytes;
    }
    return absl::OkStatus();
  }

 private:
  int64_t axis_;
  bool split_is_input_;
  std::vector<int64_t> split_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateSliceKernel(const KernelInit& init) {
  const bool params_are_inputs = init.opset() >= 10;
  std::vector<int64_t> starts, ends, axes;
  if (!params_are_inputs) {
    if (!init.HasAttribute("starts") || !init.HasAttribute("ends")) {
      return init.Error("attributes 'starts' and 'ends' are required");
    }
    TRAIND_ASSIGN_OR_RETURN(starts, init.GetInts("starts"));
    TRAIND_ASSIGN_OR_RETURN(ends, init.GetInts("ends"));
    TRAIND_ASSIGN_OR_RETURN(axes, init.GetInts("axes"));
    if (ends.size() != starts.size() || (!axes.empty() && axes.size() != starts.size())) {
      return init.Error("attributes 'starts', 'ends' and 'axes' must have one length");
    }
  } else if (init.num_inputs() < 3) {
    return init.Error("inputs 'starts' and 'ends' are required");
  }
  return std::unique_ptr<Kernel>(
      new SliceKernel(params_are_inputs, std::move(starts), std::move(ends), std::move(axes)));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSplitKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int64_t axis, init.GetInt("axis", 0));
  const bool split_is_input = init.opset() >= 13;
  std::vector<int64_t> split;
  if (!split_is_input) {
    TRAIND_ASSIGN_OR_RETURN(split, init.GetInts("split"));
    if (!split.empty() && static_cast<int>(split.size()) != init.num_outputs()) {
      return init.Error(absl::StrCat("attribute 'split' has ", split.size(), " entries for ",
                                     init.num_outputs(), " outputs"));
    }
  }
  if (init.num_outputs() < 1) return init.Error("Split needs at least one output");
  return std::unique_ptr<Kernel>(new SplitKernel(axis, split_is_input, std::move(split)));
}

// Slice (opset 10+, steps 1): dx is dy placed back at the sliced window, zeros elsewhere: Pad(dy) by the
// window's offsets. starts/ends/axes/steps must be constants of the graph.
absl::Status SliceGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  if (g.opset() < 10) return absl::UnimplementedError("Slice gradients need opset 10 or later");
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> shape, g.StaticShape(g.I(0)));
  const int64_t rank = static_cast<int64_t>(shape.size());
  auto constant = [&g](int i) -> std::optional<std::vector<int64_t>> {
    if (g.num_inputs() <= i || g.I(i).empty()) return std::vector<int64_t>{};
    return g.ConstantInts(g.I(i));
  };
  std::optional<std::vector<int64_t>> starts = constant(1), ends = constant(2), axes = constant(3),
                                      steps = constant(4);
  if (!starts || !ends || !axes || !steps) {
    return absl::UnimplementedError("Slice gradients need constant starts, ends, axes and steps");
  }
  if (axes->empty()) {
    for (size_t i = 0; i < starts->size(); ++i) axes->push_back(static_cast<int64_t>(i));
  }
  std::vector<int64_t> pads(2 * rank, 0);
  for (size_t i = 0; i < starts->size(); ++i) {
    if (!steps->empty() && (*steps)[i] != 1) return absl::UnimplementedError("Slice gradients with steps != 1");
    int64_t axis = (*axes)[i];
    if (axis < 0) axis += rank;
    const int64_t dim = shape[axis];
    auto clamp = [dim](int64_t index) {
      if (index < 0) index += dim;
      return std::max<int64_t>(0, std::min(index, dim));
    };
    const int64_t begin = clamp((*starts)[i]);
    const int64_t end = std::max(begin, clamp((*ends)[i]));
    pads[axis] = begin;
    pads[axis + rank] = dim - end;
  }
  g.Emit("Pad", {g.GO(0), g.Int64Constant(pads)}, {g.GI(0)});
  return absl::OkStatus();
}

// Split: dx = Concat of the outputs' gradients along the axis, zeros for outputs that receive none.
absl::Status SplitGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> shape, g.StaticShape(g.I(0)));
  std::vector<std::string> pieces;
  for (int i = 0; i < g.node().output_size(); ++i) {
    if (g.HasGO(i)) {
      pieces.push_back(g.GO(i));
      continue;
    }
    TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> piece_shape, g.StaticShape(g.O(i)));
    pieces.push_back(g.Zeros(g.Int64Constant(piece_shape), type));
  }
  TRAIND_ASSIGN_OR_RETURN(const int64_t axis, g.AxisAttr("axis", 0, static_cast<int64_t>(shape.size())));
  GradientRuleContext::SetIntAttr(g.Emit("Concat", pieces, {g.GI(0)}), "axis", axis);
  return absl::OkStatus();
}

}  // namespace traind::engine
