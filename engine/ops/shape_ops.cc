// Ops that only change a shape and so forward their input's buffer without copying: Identity,
// Reshape, Flatten, Squeeze, Unsqueeze. Plus Shape, which reads one.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_rule.h"
#include "engine/core/status_macros.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {
namespace {

// Reads a 1-D (or scalar) int64 tensor such as Reshape's shape or Squeeze's axes.
absl::StatusOr<std::vector<int64_t>> ReadInt64s(const Tensor& tensor, const char* what) {
  if (tensor.dtype() != DataType::kInt64 || tensor.rank() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be a 1-D int64 tensor, got ",
                                                   tensor.DebugString()));
  }
  const int64_t* data = tensor.data<int64_t>();
  return std::vector<int64_t>(data, data + tensor.num_elements());
}

// Normalises axes against `rank` and rejects duplicates.
absl::StatusOr<std::vector<int64_t>> NormalizeAxes(std::vector<int64_t> axes, int64_t rank) {
  for (int64_t& axis : axes) {
    TRAIND_ASSIGN_OR_RETURN(axis, NormalizeAxis(axis, rank));
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) {
    return absl::InvalidArgumentError("axes contain a duplicate");
  }
  return axes;
}

class IdentityKernel final : public Kernel {
 public:
  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    context.SetOutput(0, *x);
    return absl::OkStatus();
  }
};

class ReshapeKernel final : public Kernel {
 public:
  explicit ReshapeKernel(bool allow_zero) : allow_zero_(allow_zero) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* data, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* shape_tensor, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(Shape shape, ReadInt64s(*shape_tensor, "Reshape shape"));
    int inferred = -1;
    int64_t known = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 0 && !allow_zero_) {
        if (i >= data->shape().size()) {
          return absl::InvalidArgumentError("Reshape: 0 copies a dim the input does not have");
        }
        shape[i] = data->dim(i);
      }
      if (shape[i] == -1) {
        if (inferred >= 0) return absl::InvalidArgumentError("Reshape: more than one -1");
        inferred = static_cast<int>(i);
        continue;
      }
      if (shape[i] < 0) {
        return absl::InvalidArgumentError(absl::StrCat("Reshape: invalid dim ", shape[i]));
      }
      if (!CheckedMul(known, shape[i], &known)) {
        return absl::InvalidArgumentError("Reshape: shape overflows");
      }
    }
    if (inferred >= 0) {
      if (known == 0 || data->num_elements() % known != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Reshape: cannot infer -1 reshaping ", data->DebugString(), " to ",
            ShapeToString(shape)));
      }
      shape[inferred] = data->num_elements() / known;
    } else if (known != data->num_elements()) {
      return absl::InvalidArgumentError(absl::StrCat("Reshape: ", data->DebugString(),
                                                     " cannot become ", ShapeToString(shape)));
    }
    context.SetOutput(0, data->Reshaped(std::move(shape)));
    return absl::OkStatus();
  }

 private:
  bool allow_zero_;
};

class FlattenKernel final : public Kernel {
 public:
  explicit FlattenKernel(int64_t axis) : axis_(axis) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    const int64_t rank = x->rank();
    // Flatten's axis lies in [-rank, rank]; axis == rank puts everything in the outer dim.
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 0 || axis > rank) return absl::InvalidArgumentError("Flatten: axis out of range");
    const int64_t outer = DimProduct(x->shape(), 0, static_cast<size_t>(axis));
    const int64_t inner = DimProduct(x->shape(), static_cast<size_t>(axis), x->shape().size());
    context.SetOutput(0, x->Reshaped({outer, inner}));
    return absl::OkStatus();
  }

 private:
  int64_t axis_;
};

// Squeeze and Unsqueeze: axes come from an attribute before opset 13 and from input 1 after.
class SqueezeKernel final : public Kernel {
 public:
  SqueezeKernel(bool unsqueeze, bool axes_from_input, std::vector<int64_t> axes)
      : unsqueeze_(unsqueeze), axes_from_input_(axes_from_input), axes_(std::move(axes)) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    std::vector<int64_t> axes = axes_;
    bool have_axes = !axes_from_input_ || context.input(1) != nullptr;
    if (axes_from_input_ && context.input(1) != nullptr) {
      TRAIND_ASSIGN_OR_RETURN(axes, ReadInt64s(*context.input(1), "axes"));
    }
    if (!axes_from_input_ && axes.empty()) have_axes = false;
    const Shape& in = x->shape();
    Shape out;
    if (unsqueeze_) {
      if (!have_axes) return absl::InvalidArgumentError("Unsqueeze: axes are required");
      const int64_t out_rank = x->rank() + static_cast<int64_t>(axes.size());
      TRAIND_ASSIGN_OR_RETURN(axes, NormalizeAxes(std::move(axes), out_rank));
      size_t next_input_dim = 0;
      size_t next_axis = 0;
      for (int64_t d = 0; d < out_rank; ++d) {
        if (next_axis < axes.size() && axes[next_axis] == d) {
          out.push_back(1);
          ++next_axis;
        } else {
          out.push_back(in[next_input_dim++]);
        }
      }
    } else if (!have_axes) {
      for (int64_t dim : in) {
        if (dim != 1) out.push_back(dim);
      }
    } else {
      TRAIND_ASSIGN_OR_RETURN(axes, NormalizeAxes(std::move(axes), x->rank()));
      for (int64_t d = 0; d < x->rank(); ++d) {
        if (std::binary_search(axes.begin(), axes.end(), d)) {
          if (in[d] != 1) {
            return absl::InvalidArgumentError(
                absl::StrCat("Squeeze: dim ", d, " of ", x->DebugString(), " is not 1"));
          }
          continue;
        }
        out.push_back(in[d]);
      }
    }
    context.SetOutput(0, x->Reshaped(std::move(out)));
    return absl::OkStatus();
  }

 private:
  bool unsqueeze_;
  bool axes_from_input_;
  std::vector<int64_t> axes_;
};

class ShapeKernel final : public Kernel {
 public:
  ShapeKernel(int64_t start, std::optional<int64_t> end) : start_(start), end_(end) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    const int64_t rank = x->rank();
    // Opset 15 slicing: negative values count from the end; both clamp to [0, rank].
    auto clamp = [rank](int64_t value) {
      if (value < 0) value += rank;
      return std::clamp<int64_t>(value, 0, rank);
    };
    const int64_t begin = clamp(start_);
    const int64_t end = std::max(begin, end_ ? clamp(*end_) : rank);
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, DataType::kInt64, {end - begin}));
    std::copy(x->shape().begin() + begin, x->shape().begin() + end, y->mutable_data<int64_t>());
    return absl::OkStatus();
  }

 private:
  int64_t start_;
  std::optional<int64_t> end_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateIdentityKernel(const KernelInit&) {
  return std::unique_ptr<Kernel>(new IdentityKernel());
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateReshapeKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int64_t allow_zero, init.GetInt("allowzero", 0));
  return std::unique_ptr<Kernel>(new ReshapeKernel(allow_zero != 0));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateFlattenKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int64_t axis, init.GetInt("axis", 1));
  return std::unique_ptr<Kernel>(new FlattenKernel(axis));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSqueezeKernel(const KernelInit& init) {
  const bool axes_from_input = init.opset() >= 13;
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> axes, init.GetInts("axes"));
  return std::unique_ptr<Kernel>(new SqueezeKernel(false, axes_from_input, std::move(axes)));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateUnsqueezeKernel(const KernelInit& init) {
  const bool axes_from_input = init.opset() >= 13;
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> axes, init.GetInts("axes"));
  if (!axes_from_input && axes.empty()) return init.Error("attribute 'axes' is required");
  return std::unique_ptr<Kernel>(new SqueezeKernel(true, axes_from_input, std::move(axes)));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateShapeKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int64_t start, init.GetInt("start", 0));
  std::optional<int64_t> end;
  if (init.HasAttribute("end")) {
    TRAIND_ASSIGN_OR_RETURN(end, init.GetInt("end", std::nullopt));
  }
  return std::unique_ptr<Kernel>(new ShapeKernel(start, end));
}

absl::Status IdentityGradient(GradientRuleContext& g) {
  if (g.NeedsGI(0)) g.Emit("Identity", {g.GO(0)}, {g.GI(0)});
  return absl::OkStatus();
}

// Reshape, Flatten, Squeeze, Unsqueeze only relabel elements: dx = dy reshaped to x's shape.
absl::Status ReshapeLikeGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  const std::string shape = g.Temp("x_shape");
  g.Emit("Shape", {g.I(0)}, {shape});
  g.Emit("Reshape", {g.GO(0), shape}, {g.GI(0)});
  return absl::OkStatus();
}

}  // namespace traind::engine
