// Ops that generate or mask by position: Range (arithmetic sequence), OneHot, NonZero (positions
// of non-zero elements), Trilu (keep the upper/lower triangle of the last two dims) and Size.
#include <algorithm>
#include <cmath>
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

// Range: out[i] = start + i * delta for i < max(ceil((limit - start) / delta), 0).
class RangeKernel final : public Kernel {
 public:
  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* start, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* limit, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* delta, context.RequiredInput(2));
    for (const Tensor* t : {start, limit, delta}) {
      if (t->num_elements() != 1 || t->dtype() != start->dtype()) {
        return absl::InvalidArgumentError(
            "Range: start, limit and delta must be one-element tensors of one dtype");
      }
    }
    return DispatchAmong<float, double, int16_t, int32_t, int64_t>(
        start->dtype(), "Range", [&](auto tag) -> absl::Status {
          using T = typename decltype(tag)::type;
          const T first = *start->data<T>(), end = *limit->data<T>(), step = *delta->data<T>();
          if (step == T(0)) return absl::InvalidArgumentError("Range: delta must not be 0");
          int64_t count = 0;
          if constexpr (std::is_integral_v<T>) {
            // Exact ceil division in 128 bits: limit - start may overflow int64.
            const __int128 span = static_cast<__int128>(end) - first;
            const __int128 magnitude = step > 0 ? step : -static_cast<__int128>(step);
            const __int128 directed = step > 0 ? span : -span;
            const __int128 n = directed > 0 ? (directed + magnitude - 1) / magnitude : 0;
            if (n > kMaxTensorElements) {
              return absl::InvalidArgumentError("Range: too many elements");
            }
            count = static_cast<int64_t>(n);
          } else {
            const double n = std::ceil((static_cast<double>(end) - first) / step);
            if (!(n <= static_cast<double>(kMaxTensorElements))) {  // Also catches NaN.
              return absl::InvalidArgumentError("Range: too many elements (or NaN/inf bounds)");
            }
            count = n > 0 ? static_cast<int64_t>(n) : 0;
          }
          TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, start->dtype(), {count}));
          T* out = y->mutable_data<T>();
          // Each value lies between start and limit, so it fits T.
          for (int64_t i = 0; i < count; ++i) {
            if constexpr (std::is_integral_v<T>) {
              // Unsigned (wrapping) arithmetic: step * i alone may exceed int64 even though
              // first + step * i does not.
              out[i] = static_cast<T>(static_cast<int64_t>(
                  static_cast<uint64_t>(first) +
                  static_cast<uint64_t>(step) * static_cast<uint64_t>(i)));
            } else {
              out[i] = static_cast<T>(first + step * static_cast<T>(i));
            }
          }
          return absl::OkStatus();
        });
  }
};

class SizeKernel final : public Kernel {
 public:
  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, DataType::kInt64, {}));
    *y->mutable_data<int64_t>() = x->num_elements();
    return absl::OkStatus();
  }
};

// Trilu: zeroes the elements of each trailing [N, M] matrix outside the band selected by k:
// upper keeps j - i >= k, lower keeps j - i <= k.
class TriluKernel final : public Kernel {
 public:
  explicit TriluKernel(bool upper) : upper_(upper) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    if (x->rank() < 2) {
      return absl::InvalidArgumentError(absl::StrCat("Trilu: input ", x->DebugString(),
                                                     " must have rank >= 2"));
    }
    int64_t k = 0;
    if (const Tensor* k_tensor = context.input(1)) {
      TRAIND_ASSIGN_OR_RETURN(k, ReadIndexScalar(*k_tensor, "Trilu k"));
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
    if (y->num_elements() == 0) return absl::OkStatus();
    const int64_t cols = x->dim(x->rank() - 1);
    const int64_t rows = y->num_elements() / cols;  // All matrices' rows, stacked.
    const int64_t rows_per_matrix = x->dim(x->rank() - 2);
    const size_t element_size = ElementSize(x->dtype());
    const char* in = static_cast<const char*>(x->raw_data());
    char* out = static_cast<char*>(y->mutable_raw_data());
    // Zero bytes are zero (or false) in every dtype, so this works by width.
    context.threads().ParallelFor(
        rows, std::max<int64_t>(1, kParallelElementThreshold / cols),
        [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const int64_t i = r % rows_per_matrix;
            // Kept columns are [keep_begin, keep_end); k may be huge, so clamp before adding.
            const int64_t bound = std::clamp<int64_t>(k, -cols - rows_per_matrix,
                                                      cols + rows_per_matrix) + i;
            const int64_t keep_begin = upper_ ? std::clamp<int64_t>(bound, 0, cols) : 0;
            const int64_t keep_end = upper_ ? cols : std::clamp<int64_t>(bound + 1, 0, cols);
            const size_t row_offset = static_cast<size_t>(r * cols) * element_size;
            char* dst = out + row_offset;
            const char* src = in + row_offset;
            std::memset(dst, 0, static_cast<size_t>(cols) * element_size);
            if (keep_end > keep_begin) {
              std::memcpy(dst + keep_begin * element_size, src + keep_begin * element_size,
                          static_cast<size_t>(keep_end - keep_begin) * element_size);
            }
          }
        });
    return absl::OkStatus();
  }

 private:
  bool upper_;
};

// Converts one index or depth value to int64; non-finite or huge floats map to `fallback`.
template <typename T>
int64_t ToInt64(T value, int64_t fallback) {
  if constexpr (std::is_floating_point_v<T>) {
    if (!(value > -9.0e18 && value < 9.0e18)) return fallback;
  } else if constexpr (std::is_unsigned_v<T> && sizeof(T) == sizeof(int64_t)) {
    if (value > static_cast<T>(std::numeric_limits<int64_t>::max())) return fallback;
  }
  return static_cast<int64_t>(value);
}

// OneHot: output[..., d, ...] (d inserted at `axis`) = on if indices[...] == d (negative
// indices count from depth) else off. Indices outside [-depth, depth) give an all-off row.
class OneHotKernel final : public Kernel {
 public:
  explicit OneHotKernel(int64_t axis) : axis_(axis) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* indices, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* depth_tensor, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* values, context.RequiredInput(2));
    if (depth_tensor->num_elements() != 1 || values->num_elements() != 2) {
      return absl::InvalidArgumentError(
          "OneHot: depth must have one element and values two ([off, on])");
    }
    int64_t depth = 0;
    TRAIND_RETURN_IF_ERROR(DispatchAmong<TRAIND_NUMERIC_TYPES>(
        depth_tensor->dtype(), "OneHot depth", [&](auto tag) {
          using D = typename decltype(tag)::type;
          depth = ToInt64(*depth_tensor->data<D>(), -1);
          return absl::OkStatus();
        }));
    if (depth < 1 || depth > kMaxTensorElements) {
      return absl::InvalidArgumentError(absl::StrCat("OneHot: depth ", depth, " must be >= 1"));
    }
    const int64_t out_rank = indices->rank() + 1;
    const int64_t axis = axis_ < 0 ? axis_ + out_rank : axis_;
    if (axis < 0 || axis >= out_rank) {
      return absl::InvalidArgumentError(absl::StrCat("OneHot: axis ", axis_,
                                                     " out of range for output rank ", out_rank));
    }
    Shape out_shape = indices->shape();
    out_shape.insert(out_shape.begin() + axis, depth);
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, values->dtype(), out_shape));
    if (y->num_elements() == 0) return absl::OkStatus();
    const int64_t outer = DimProduct(indices->shape(), 0, axis);
    const int64_t inner = DimProduct(indices->shape(), axis, indices->shape().size());
    return DispatchAmong<TRAIND_NUMERIC_TYPES>(
        indices->dtype(), "OneHot indices", [&](auto index_tag) {
          using I = typename decltype(index_tag)::type;
          const I* index_data = indices->data<I>();
          return DispatchByWidth(values->dtype(), "OneHot", [&](auto tag) {
            using T = typename decltype(tag)::type;
            const T off = values->data<T>()[0], on = values->data<T>()[1];
            T* out = y->mutable_data<T>();
            std::fill(out, out + y->num_elements(), off);
            for (int64_t o = 0; o < outer; ++o) {
              for (int64_t i = 0; i < inner; ++i) {
                int64_t index = ToInt64(index_data[o * inner + i], depth);
                if (index < 0) index += depth;
                if (index < 0 || index >= depth) continue;  // All-off, as the spec says.
                out[(o * depth + index) * inner + i] = on;
              }
            }
            return absl::OkStatus();
          });
        });
  }

 private:
  int64_t axis_;
};

// NonZero: int64 [rank, count] holding the coordinates of the non-zero elements in row-major
// order (numpy.nonzero; a scalar is treated as a 1-element vector, as numpy does).
class NonZeroKernel final : public Kernel {
 public:
  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    const Shape shape = x->rank() == 0 ? Shape{1} : x->shape();
    const int64_t rank = static_cast<int64_t>(shape.size());
    return DispatchAmong<TRAIND_NUMERIC_TYPES, BoolType>(x->dtype(), "NonZero", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* in = x->data<T>();
      const int64_t n = x->num_elements();
      int64_t count = 0;
      for (int64_t i = 0; i < n; ++i) count += in[i] != T(0);
      TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, DataType::kInt64,
                                                                 {rank, count}));
      int64_t* out = y->mutable_data<int64_t>();
      std::vector<int64_t> coord(rank, 0);
      int64_t column = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (in[i] != T(0)) {
          for (int64_t d = 0; d < rank; ++d) out[d * count + column] = coord[d];
          ++column;
        }
        for (int64_t d = rank - 1; d >= 0 && ++coord[d] == shape[d]; --d) coord[d] = 0;
      }
      return absl::OkStatus();
    });
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateRangeKernel(const KernelInit&) {
  return std::unique_ptr<Kernel>(new RangeKernel());
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSizeKernel(const KernelInit&) {
  return std::unique_ptr<Kernel>(new SizeKernel());
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateTriluKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int64_t upper, init.GetInt("upper", 1));
  if (upper != 0 && upper != 1) return init.Error("attribute 'upper' must be 0 or 1");
  return std::unique_ptr<Kernel>(new TriluKernel(upper == 1));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateOneHotKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int64_t axis, init.GetInt("axis", -1));
  return std::unique_ptr<Kernel>(new OneHotKernel(axis));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateNonZeroKernel(const KernelInit&) {
  return std::unique_ptr<Kernel>(new NonZeroKernel());
}

// Trilu keeps or zeroes each element independently: dx is Trilu of dy with the same k and `upper`.
absl::Status TriluGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  std::vector<std::string> inputs = {g.GO(0)};
  if (g.num_inputs() > 1 && !g.I(1).empty()) inputs.push_back(g.I(1));
  GradientRuleContext::SetIntAttr(g.Emit("Trilu", inputs, {g.GI(0)}), "upper", g.IntAttr("upper", 1));
  return absl::OkStatus();
}

}  // namespace traind::engine
