// Pad: modes constant, reflect and edge. Opsets 2-10 take `pads` and `value` as attributes; from
// 11 they are inputs (pads int64 [2 * rank], optional scalar constant_value of X's dtype).
// Negative pads crop.
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_rule.h"
#include "engine/core/status_macros.h"
#include "engine/ops/index_helpers.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {
namespace {

enum class PadMode { kConstant, kReflect, kEdge };

// Input coordinate that output coordinate `o` of one dim reads, or -1 for "the constant value".
// `begin` is that dim's leading pad (negative when cropping) and `dim` the input dim.
// Invariant for reflect/edge: dim >= 1 (checked by the kernel when any padding happens).
inline int64_t SourceIndex(PadMode mode, int64_t o, int64_t begin, int64_t dim) {
  const int64_t i = o - begin;
  if (i >= 0 && i < dim) return i;
  switch (mode) {
    case PadMode::kConstant:
      return -1;
    case PadMode::kEdge:
      return i < 0 ? 0 : dim - 1;
    case PadMode::kReflect: {
      if (dim == 1) return 0;
      // numpy's reflect: mirror without repeating the edge, period 2 * (dim - 1).
      const int64_t period = 2 * (dim - 1);
      int64_t m = i % period;
      if (m < 0) m += period;
      return m < dim ? m : period - m;
    }
  }
  return -1;
}

// The opset 2-10 `value` attribute is a float; convert it without undefined behaviour for
// integer outputs (NaN -> 0, saturating).
template <typename T>
T FromFloat(float value) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(value);
  } else {
    if (value != value) return T(0);
    if (value <= static_cast<double>(std::numeric_limits<T>::lowest())) {
      return std::numeric_limits<T>::lowest();
    }
    if (value >= static_cast<double>(std::numeric_limits<T>::max())) {
      return std::numeric_limits<T>::max();
    }
    return static_cast<T>(value);
  }
}

class PadKernel final : public Kernel {
 public:
  // Opsets 2-10: pads and value from attributes (`attr_pads`, `attr_value`).
  PadKernel(PadMode mode, bool pads_are_inputs, std::vector<int64_t> attr_pads, float attr_value)
      : mode_(mode), pads_are_inputs_(pads_are_inputs), attr_pads_(std::move(attr_pads)),
        attr_value_(attr_value) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    std::vector<int64_t> pads = attr_pads_;
    const Tensor* value_tensor = nullptr;
    if (pads_are_inputs_) {
      TRAIND_ASSIGN_OR_RETURN(const Tensor* pads_tensor, context.RequiredInput(1));
      if (pads_tensor->dtype() != DataType::kInt64) {
        return absl::InvalidArgumentError("Pad: pads must be an int64 tensor");
      }
      TRAIND_ASSIGN_OR_RETURN(pads, ReadIndexVector(*pads_tensor, "Pad pads"));
      value_tensor = context.input(2);
      if (value_tensor != nullptr &&
          (value_tensor->dtype() != x->dtype() || value_tensor->num_elements() != 1)) {
        return absl::InvalidArgumentError(
            "Pad: constant_value must be a one-element tensor of the input's dtype");
      }
    }
    const int64_t rank = x->rank();
    if (static_cast<int64_t>(pads.size()) != 2 * rank) {
      return absl::InvalidArgumentError(absl::StrCat("Pad: ", pads.size(), " pads for input ",
                                                     x->DebugString(), " (need 2 * rank)"));
    }
    Shape out_shape(rank);
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t begin = pads[d], end = pads[d + rank];
      // Pads beyond the element limit would overflow below; they could never be allocated.
      if (begin > kMaxTensorElements || begin < -kMaxTensorElements || end > kMaxTensorElements ||
          end < -kMaxTensorElements) {
        return absl::InvalidArgumentError("Pad: pad too large");
      }
      out_shape[d] = x->dim(d) + begin + end;
      if (out_shape[d] < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("Pad: pads ", begin, ", ", end, " crop more than dim ", d, " of ",
                         x->DebugString()));
      }
      if (mode_ != PadMode::kConstant && x->dim(d) == 0 && out_shape[d] > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Pad: reflect/edge cannot pad dim ", d, " of ", x->DebugString(), ": it is empty"));
      }
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), out_shape));
    if (y->num_elements() == 0) return absl::OkStatus();
    if (rank == 0) {
      std::memcpy(y->mutable_raw_data(), x->raw_data(), x->byte_size());
      return absl::OkStatus();
    }
    // The constant value is converted per dtype, so this dispatches on the real type.
    return DispatchAmong<TRAIND_NUMERIC_TYPES, BoolType>(x->dtype(), "Pad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T value = FromFloat<T>(attr_value_);
      if (value_tensor != nullptr) value = *value_tensor->data<T>();
      Fill<T>(*x, pads, value, y, context.threads());
      return absl::OkStatus();
    });
  }

 private:
  template <typename T>
  void Fill(const Tensor& x, const std::vector<int64_t>& pads, T value, Tensor* y,
            ThreadPool& threads) const {
    const int64_t rank = x.rank();
    const Shape& out_shape = y->shape();
    const std::vector<int64_t> in_strides = RowMajorStrides(x.shape());
    const int64_t row = out_shape[rank - 1];
    const int64_t in_row = x.dim(rank - 1);
    const int64_t row_begin = pads[rank - 1];
    // Output columns [copy_begin, copy_end) read the input row contiguously.
    const int64_t copy_begin = std::clamp<int64_t>(row_begin, 0, row);
    const int64_t copy_end = std::clamp<int64_t>(row_begin + in_row, 0, row);
    const T* in = x.data<T>();
    T* out = y->mutable_data<T>();
    const PadMode mode = mode_;
    threads.ParallelFor(
        y->num_elements() / row, std::max<int64_t>(1, kParallelElementThreshold / row),
        [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            T* dst = out + r * row;
            int64_t offset = 0;
            int64_t rest = r;
            bool constant_row = false;
            for (int64_t d = rank - 2; d >= 0 && !constant_row; --d) {
              const int64_t source = SourceIndex(mode, rest % out_shape[d], pads[d], x.dim(d));
              rest /= out_shape[d];
              if (source < 0) {
                constant_row = true;
              } else {
                offset += source * in_strides[d];
              }
            }
            if (constant_row) {
              std::fill(dst, dst + row, value);
              continue;
            }
            const T* src = in + offset;
            for (int64_t o = 0; o < copy_begin; ++o) {
              const int64_t source = SourceIndex(mode, o, row_begin, in_row);
              dst[o] = source < 0 ? value : src[source];
            }
            if (copy_end > copy_begin) {
              std::copy(src + (copy_begin - row_begin), src + (copy_end - row_begin),
                        dst + copy_begin);
            }
            for (int64_t o = std::max(copy_begin, copy_end); o < row; ++o) {
              const int64_t source = SourceIndex(mode, o, row_begin, in_row);
              dst[o] = source < 0 ? value : src[source];
            }
          }
        });
  }

  PadMode mode_;
  bool pads_are_inputs_;
  std::vector<int64_t> attr_pads_;
  float attr_value_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreatePadKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(std::string mode_name, init.GetString("mode", "constant"));
  PadMode mode;
  if (mode_name == "constant") {
    mode = PadMode::kConstant;
  } else if (mode_name == "reflect") {
    mode = PadMode::kReflect;
  } else if (mode_name == "edge") {
    mode = PadMode::kEdge;
  } else {
    return init.Error(absl::StrCat("attribute 'mode' must be constant, reflect or edge, got '",
                                   mode_name, "'"));
  }
  const bool pads_are_inputs = init.opset() >= 11;
  std::vector<int64_t> pads;
  float value = 0.0f;
  if (!pads_are_inputs) {
    if (!init.HasAttribute("pads")) return init.Error("required attribute 'pads' is missing");
    TRAIND_ASSIGN_OR_RETURN(pads, init.GetInts("pads"));
    TRAIND_ASSIGN_OR_RETURN(value, init.GetFloat("value", 0.0f));
  } else if (!init.has_input(1)) {
    return init.Error("input 'pads' is required");
  }
  return std::unique_ptr<Kernel>(new PadKernel(mode, pads_are_inputs, std::move(pads), value));
}

// Pad (opset 11+, constant mode, non-negative pads that are constants of the graph): dx is the window of dy
// that holds x.
absl::Status PadGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  if (g.opset() < 11) return absl::UnimplementedError("Pad gradients need opset 11 or later");
  for (const auto& attribute : g.node().attribute()) {
    if (attribute.name() == "mode" && attribute.s() != "constant") {
      return absl::UnimplementedError("Pad gradients support mode 'constant' only");
    }
  }
  std::optional<std::vector<int64_t>> pads = g.ConstantInts(g.I(1));
  if (!pads.has_value()) return absl::UnimplementedError("Pad gradients need constant pads");
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> shape, g.StaticShape(g.I(0)));
  const size_t rank = shape.size();
  if (pads->size() != 2 * rank) return absl::UnimplementedError("Pad gradients need pads for every axis");
  std::vector<int64_t> starts, ends;
  for (size_t d = 0; d < rank; ++d) {
    if ((*pads)[d] < 0 || (*pads)[d + rank] < 0) return absl::UnimplementedError("negative pads");
    starts.push_back((*pads)[d]);
    ends.push_back((*pads)[d] + shape[d]);
  }
  g.Emit("Slice", {g.GO(0), g.Int64Constant(starts), g.Int64Constant(ends)}, {g.GI(0)});
  return absl::OkStatus();
}

}  // namespace traind::engine
