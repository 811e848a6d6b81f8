// Reductions over a set of axes (ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1
// ReduceL2 ReduceLogSum ReduceLogSumExp ReduceSumSquare) and over one axis (ArgMax ArgMin).
//
// Axes come from the `axes` attribute, except ReduceSum from opset 13 on, which reads them from
// optional input 1. No axes means "all axes", unless noop_with_empty_axes (ReduceSum 13+) makes
// the op an identity.
//
// Each reduction is a small "reducer" (Init / Step / Merge / Finish) run over the input collapsed
// to [outer, reduced, inner] (reduced dims that are adjacent once size-1 dims are dropped):
//   inner == 1: each output folds one contiguous row (4 independent accumulators for ILP);
//   inner  > 1: accumulators for a block of inner positions, advanced row by row (vectorisable);
// and, when the reduced axes are not adjacent (e.g. axes 0 and 2 of [3,4,5]), a gather over
// precomputed reduced offsets.
#include "engine/ops/reduce_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_rule.h"
#include "engine/core/status_macros.h"
#include "engine/ops/axis_split.h"
#include "engine/ops/elementwise.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

absl::StatusOr<ReduceAttributes> ParseReduceAttributes(const KernelInit& init, bool axes_input_since_13) {
  ReduceAttributes attributes;
  attributes.axes_from_input = axes_input_since_13 && init.opset() >= 13;
  if (attributes.axes_from_input) {
    if (init.HasAttribute("axes")) {
      return init.Error("axes is an input from opset 13 on, not an attribute");
    }
  } else {
    TRAIND_ASSIGN_OR_RETURN(attributes.axes, init.GetInts("axes"));
    for (size_t i = 0; i < attributes.axes.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (attributes.axes[i] == attributes.axes[j]) {
          return init.Error(absl::StrCat("attribute 'axes' repeats ", attributes.axes[i]));
        }
      }
    }
  }
  TRAIND_ASSIGN_OR_RETURN(int64_t keepdims, init.GetInt("keepdims", 1));
  TRAIND_ASSIGN_OR_RETURN(int64_t noop, init.GetInt("noop_with_empty_axes", 0));
  if ((keepdims != 0 && keepdims != 1) || (noop != 0 && noop != 1)) {
    return init.Error("attributes 'keepdims' and 'noop_with_empty_axes' must be 0 or 1");
  }
  attributes.keepdims = keepdims == 1;
  attributes.noop_with_empty_axes = noop == 1;
  return attributes;
}

absl::StatusOr<std::optional<std::vector<bool>>> ReducedDims(const char* op, const Tensor& x, const Tensor* axes_input,
                                                             const ReduceAttributes& attributes) {
  absl::Span<const int64_t> axes = attributes.axes;
  if (axes_input != nullptr) {
    if (axes_input->dtype() != DataType::kInt64 || axes_input->rank() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": axes must be a 1-D int64 tensor, got ", axes_input->DebugString()));
    }
    axes = absl::MakeConstSpan(axes_input->data<int64_t>(), static_cast<size_t>(axes_input->num_elements()));
  }
  if (axes.empty() && attributes.noop_with_empty_axes) return std::nullopt;
  std::vector<bool> reduce(static_cast<size_t>(x.rank()), axes.empty());
  for (int64_t axis : axes) {
    TRAIND_ASSIGN_OR_RETURN(int64_t normalized, NormalizeAxis(axis, x.rank()));
    if (reduce[normalized]) return absl::InvalidArgumentError(absl::StrCat(op, ": axis ", axis, " is repeated"));
    reduce[normalized] = true;
  }
  return reduce;
}

Shape ReducedShape(const Shape& shape, const std::vector<bool>& reduced, bool keepdims) {
  Shape output;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d]) {
      output.push_back(shape[d]);
    } else if (keepdims) {
      output.push_back(1);
    }
  }
  return output;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Reducers. Acc is the running state; Finish turns it into the output given the element count.

template <typename T>
constexpr T LowestValue() {
  return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
}
template <typename T>
constexpr T HighestValue() {
  return std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::max();
}
template <typename T>
bool IsNan(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(x);
  } else {
    return false;
  }
}

template <typename T>
struct SumReducer {
  using Acc = T;
  static Acc Init() { return T(0); }
  static Acc Step(Acc acc, T x) { return WrapAdd(acc, x); }
  static Acc Merge(Acc a, Acc b) { return WrapAdd(a, b); }
  static T Finish(Acc acc, int64_t) { return acc; }
};

template <typename T>
struct MeanReducer : SumReducer<T> {
  static T Finish(T acc, int64_t count) {
    if constexpr (std::is_integral_v<T>) {
      if (count == 0) return T(0);  // Integer 0/0 would trap; floats give NaN like numpy.
    }
    return static_cast<T>(acc / static_cast<T>(count));
  }
};

template <typename T>
struct SumSquareReducer : SumReducer<T> {
  static T Step(T acc, T x) { return WrapAdd(acc, WrapMul(x, x)); }
};

template <typename T>
struct L1Reducer : SumReducer<T> {
  static T Step(T acc, T x) {
    if constexpr (std::is_unsigned_v<T>) {
      return WrapAdd(acc, x);
    } else {
      return WrapAdd(acc, x < T(0) ? WrapNeg(x) : x);
    }
  }
};

template <typename T>
struct L2Reducer : SumSquareReducer<T> {
  static T Finish(T acc, int64_t) { return std::sqrt(acc); }
};

template <typename T>
struct LogSumReducer : SumReducer<T> {
  static T Finish(T acc, int64_t) { return std::log(acc); }
};

template <typename T>
struct ProdReducer {
  using Acc = T;
  static Acc Init() { return T(1); }
  static Acc Step(Acc acc, T x) { return WrapMul(acc, x); }
  static Acc Merge(Acc a, Acc b) { return WrapMul(a, b); }
  static T Finish(Acc acc, int64_t) { return acc; }
};

// Max/Min propagate NaN (numpy.max does). An empty reduction yields -inf / +inf (the identity).
template <typename T>
struct MaxReducer {
  using Acc = T;
  static Acc Init() { return LowestValue<T>(); }
  static Acc Step(Acc acc, T x) { return (x > acc || IsNan(x)) ? x : acc; }
  static Acc Merge(Acc a, Acc b) { return Step(a, b); }
  static T Finish(Acc acc, int64_t) { return acc; }
};

template <typename T>
struct MinReducer {
  using Acc = T;
  static Acc Init() { return HighestValue<T>(); }
  static Acc Step(Acc acc, T x) { return (x < acc || IsNan(x)) ? x : acc; }
  static Acc Merge(Acc a, Acc b) { return Step(a, b); }
  static T Finish(Acc acc, int64_t) { return acc; }
};

// log(sum(exp(x))) in one pass with a running maximum ("online logsumexp"): the state is
// (max, sum of exp(x - max)); when a larger x arrives the sum is rescaled. Never overflows.
template <typename T>
struct LogSumExpReducer {
  struct Acc {
    T max;
    T sum;
  };
  static Acc Init() { return {-std::numeric_limits<T>::infinity(), T(0)}; }
  static Acc Step(Acc acc, T x) { return Merge(acc, Acc{x, T(1)}); }
  static Acc Merge(Acc a, Acc b) {
    if (b.max > a.max) std::swap(a, b);
    // Now a.max >= b.max (or a NaN is involved, which then propagates through the sum).
    if (b.max == -std::numeric_limits<T>::infinity()) return a;  // b contributes exp(-inf) = 0.
    if (a.max == std::numeric_limits<T>::infinity()) return a;   // Result is +inf anyway.
    return Acc{a.max, a.sum + b.sum * std::exp(b.max - a.max)};
  }
  static T Finish(Acc acc, int64_t) { return acc.max + std::log(acc.sum); }
};

// ---------------------------------------------------------------------------------------------
// Layout.

// The input viewed for one reduction. When `one_group`, the input is [outer, reduced, inner];
// otherwise the collapsed kept and reduced dims (outermost first) with their input strides are
// used to gather.
struct ReductionLayout {
  Shape output_shape;
  int64_t output_size = 1;
  int64_t reduced_size = 1;
  bool one_group = true;
  int64_t outer = 1;
  int64_t inner = 1;
  Shape kept_dims, kept_strides, reduced_dims, reduced_strides;
};

// `reduce[d]` says whether dim d is reduced.
ReductionLayout MakeLayout(const Shape& shape, const std::vector<bool>& reduce, bool keepdims) {
  ReductionLayout layout;
  layout.output_shape = ReducedShape(shape, reduce, keepdims);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (reduce[d]) {
      layout.reduced_size *= shape[d];
    } else {
      layout.output_size *= shape[d];
    }
  }
  // Merge runs of dims with the same flag, ignoring size-1 dims (they change no offsets).
  std::vector<bool> group_reduced;
  Shape group_dims;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!group_dims.empty() && group_reduced.back() == reduce[d]) {
      group_dims.back() *= shape[d];
    } else {
      group_dims.push_back(shape[d]);
      group_reduced.push_back(reduce[d]);
    }
  }
  const size_t groups = group_dims.size();
  const size_t first_reduced = std::find(group_reduced.begin(), group_reduced.end(), true) - group_reduced.begin();
  const size_t reduced_groups = std::count(group_reduced.begin(), group_reduced.end(), true);
  if (reduced_groups <= 1) {
    layout.one_group = true;
    if (reduced_groups == 0) {
      layout.outer = 1;
      layout.inner = layout.output_size;
    } else {
      layout.outer = DimProduct(group_dims, 0, first_reduced);
      layout.inner = DimProduct(group_dims, first_reduced + 1, groups);
    }
    return layout;
  }
  layout.one_group = false;
  int64_t stride = 1;
  for (size_t g = groups; g-- > 0;) {
    Shape& dims = group_reduced[g] ? layout.reduced_dims : layout.kept_dims;
    Shape& strides = group_reduced[g] ? layout.reduced_strides : layout.kept_strides;
    dims.insert(dims.begin(), group_dims[g]);
    strides.insert(strides.begin(), stride);
    stride *= group_dims[g];
  }
  return layout;
}

// Offset in the input of the element at mixed-radix position `index` over (dims, strides).
int64_t GatherOffset(int64_t index, const Shape& dims, const Shape& strides) {
  int64_t offset = 0;
  for (size_t d = dims.size(); d-- > 0;) {
    offset += (index % dims[d]) * strides[d];
    index /= dims[d];
  }
  return offset;
}

// Positions of the inner dim handled together by the strided loops (stack-sized accumulators).
constexpr int64_t kInnerBlock = 512;

template <typename R, typename T>
typename R::Acc FoldRow(const T* x, int64_t n) {
  typename R::Acc a0 = R::Init(), a1 = R::Init(), a2 = R::Init(), a3 = R::Init();
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a0 = R::Step(a0, x[i]);
    a1 = R::Step(a1, x[i + 1]);
    a2 = R::Step(a2, x[i + 2]);
    a3 = R::Step(a3, x[i + 3]);
  }
  for (; i < n; ++i) a0 = R::Step(a0, x[i]);
  return R::Merge(R::Merge(a0, a1), R::Merge(a2, a3));
}

template <typename R, typename T>
void RunReduction(const ReductionLayout& layout, const T* in, T* out, ThreadPool& threads) {
  const int64_t count = layout.reduced_size;
  if (layout.output_size == 0) return;
  if (count == 0) {  // Reducing an empty set: every output is the reducer's identity.
    for (int64_t o = 0; o < layout.output_size; ++o) out[o] = R::Finish(R::Init(), 0);
    return;
  }
  if (!layout.one_group) {
    // Gather path: reduced offsets once, then one fold per output.
    std::vector<int64_t> offsets(static_cast<size_t>(count));
    for (int64_t r = 0; r < count; ++r) {
      offsets[r] = GatherOffset(r, layout.reduced_dims, layout.reduced_strides);
    }
    threads.ParallelFor(layout.output_size, RowsPerChunk(count, kParallelElementThreshold),
                        [&](int64_t begin, int64_t end) {
                          for (int64_t o = begin; o < end; ++o) {
                            const T* base = in + GatherOffset(o, layout.kept_dims, layout.kept_strides);
                            typename R::Acc acc = R::Init();
                            for (int64_t r = 0; r < count; ++r) acc = R::Step(acc, base[offsets[r]]);
                            out[o] = R::Finish(acc, count);
                          }
                        });
    return;
  }
  const int64_t inner = layout.inner;
  if (inner == 1) {
    threads.ParallelFor(layout.outer, RowsPerChunk(count, kParallelElementThreshold), [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        out[o] = R::Finish(FoldRow<R>(in + o * count, count), count);
      }
    });
    return;
  }
  const int64_t blocks = (inner + kInnerBlock - 1) / kInnerBlock;
  threads.ParallelFor(layout.outer * blocks,
                      RowsPerChunk(count * std::min(inner, kInnerBlock), kParallelElementThreshold),
                      [&](int64_t begin, int64_t end) {
                        typename R::Acc acc[kInnerBlock];
                        for (int64_t task = begin; task < end; ++task) {
                          const int64_t o = task / blocks;
                          const int64_t i0 = (task % blocks) * kInnerBlock;
                          const int64_t width = std::min(kInnerBlock, inner - i0);
                          for (int64_t i = 0; i < width; ++i) acc[i] = R::Init();
                          const T* slab = in + o * count * inner + i0;
                          for (int64_t r = 0; r < count; ++r) {
                            const T* row = slab + r * inner;
                            for (int64_t i = 0; i < width; ++i) acc[i] = R::Step(acc[i], row[i]);
                          }
                          T* dst = out + o * inner + i0;
                          for (int64_t i = 0; i < width; ++i) dst[i] = R::Finish(acc[i], count);
                        }
                      });
}

// ---------------------------------------------------------------------------------------------
// Kernels.

template <template <typename> class Reducer, typename... Ts>
class ReduceKernel final : public Kernel {
 public:
  ReduceKernel(const char* name, ReduceAttributes attributes) : name_(name), attributes_(std::move(attributes)) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(
        std::optional<std::vector<bool>> reduced,
        ReducedDims(name_, *x, attributes_.axes_from_input ? context.input(1) : nullptr, attributes_));
    if (!reduced.has_value()) {
      return DispatchAmong<Ts...>(x->dtype(), name_, [&](auto) {
        context.SetOutput(0, *x);  // Identity; outputs may alias inputs (never written).
        return absl::OkStatus();
      });
    }
    const std::vector<bool>& reduce = *reduced;
    const ReductionLayout layout = MakeLayout(x->shape(), reduce, attributes_.keepdims);
    return DispatchAmong<Ts...>(x->dtype(), name_, [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), layout.output_shape));
      RunReduction<Reducer<T>>(layout, x->data<T>(), y->mutable_data<T>(), context.threads());
      return absl::OkStatus();
    });
  }

 private:
  const char* name_;
  ReduceAttributes attributes_;
};

#define TRAIND_REDUCE_ARITHMETIC_TYPES float, double, int32_t, int64_t, uint32_t, uint64_t

template <template <typename> class Reducer, typename... Ts>
absl::StatusOr<std::unique_ptr<Kernel>> MakeReduceKernel(const KernelInit& init, const char* name,
                                                         bool axes_input_since_13 = false) {
  TRAIND_ASSIGN_OR_RETURN(ReduceAttributes attributes, ParseReduceAttributes(init, axes_input_since_13));
  return std::unique_ptr<Kernel>(new ReduceKernel<Reducer, Ts...>(name, std::move(attributes)));
}

// ArgMax / ArgMin along one axis; int64 indices. Ties go to the first index, or the last with
// select_last_index. NaN counts as the extreme (numpy.argmax returns the first NaN).
template <bool kMax>
class ArgExtremeKernel final : public Kernel {
 public:
  ArgExtremeKernel(int64_t axis, bool keepdims, bool select_last)
      : axis_(axis), keepdims_(keepdims), select_last_(select_last) {}

  absl::Status Compute(KernelContext& context) const override {
    const char* name = kMax ? "ArgMax" : "ArgMin";
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(axis_, x->rank()));
    const AxisSplit split = SplitAtAxis(x->shape(), axis);
    if (split.axis_dim == 0 && split.outer * split.inner > 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": the reduced axis is empty"));
    }
    Shape out_shape = x->shape();
    if (keepdims_) {
      out_shape[axis] = 1;
    } else {
      out_shape.erase(out_shape.begin() + axis);
    }
    return DispatchAmong<TRAIND_NUMERIC_TYPES>(x->dtype(), name, [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, DataType::kInt64, out_shape));
      const T* in = x->data<T>();
      int64_t* out = y->mutable_data<int64_t>();
      const bool last = select_last_;
      // Whether candidate `v` replaces the current best `b`.
      auto better = [last](T v, T b) {
        if (IsNan(b)) return false;
        if (IsNan(v)) return true;
        if (v == b) return last;
        return kMax ? v > b : v < b;
      };
      const int64_t n = split.axis_dim;
      const int64_t inner = split.inner;
      context.threads().ParallelFor(split.outer * inner, RowsPerChunk(n, kParallelElementThreshold),
                                    [&](int64_t begin, int64_t end) {
                                      for (int64_t task = begin; task < end; ++task) {
                                        const int64_t o = task / inner;
                                        const T* base = in + o * n * inner + task % inner;
                                        int64_t best = 0;
                                        for (int64_t a = 1; a < n; ++a) {
                                          if (better(base[a * inner], base[best * inner])) best = a;
                                        }
                                        out[task] = best;
                                      }
                                    });
      return absl::OkStatus();
    });
  }

 private:
  int64_t axis_;
  bool keepdims_;
  bool select_last_;
};

template <bool kMax>
absl::StatusOr<std::unique_ptr<Kernel>> MakeArgExtremeKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int64_t axis, init.GetInt("axis", 0));
  TRAIND_ASSIGN_OR_RETURN(int64_t keepdims, init.GetInt("keepdims", 1));
  TRAIND_ASSIGN_OR_RETURN(int64_t select_last, init.GetInt("select_last_index", 0));
  if ((keepdims != 0 && keepdims != 1) || (select_last != 0 && select_last != 1)) {
    return init.Error("attributes 'keepdims' and 'select_last_index' must be 0 or 1");
  }
  return std::unique_ptr<Kernel>(new ArgExtremeKernel<kMax>(axis, keepdims == 1, select_last == 1));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceSumKernel(const KernelInit& init) {
  return MakeReduceKernel<SumReducer, TRAIND_REDUCE_ARITHMETIC_TYPES>(init, "ReduceSum", /*axes_input_since_13=*/true);
}
absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceMeanKernel(const KernelInit& init) {
  return MakeReduceKernel<MeanReducer, TRAIND_REDUCE_ARITHMETIC_TYPES>(init, "ReduceMean");
}
absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceProdKernel(const KernelInit& init) {
  return MakeReduceKernel<ProdReducer, TRAIND_REDUCE_ARITHMETIC_TYPES>(init, "ReduceProd");
}
absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceSumSquareKernel(const KernelInit& init) {
  return MakeReduceKernel<SumSquareReducer, TRAIND_REDUCE_ARITHMETIC_TYPES>(init, "ReduceSumSquare");
}
absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceL1Kernel(const KernelInit& init) {
  return MakeReduceKernel<L1Reducer, TRAIND_REDUCE_ARITHMETIC_TYPES>(init, "ReduceL1");
}
absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceMaxKernel(const KernelInit& init) {
  return MakeReduceKernel<MaxReducer, TRAIND_REDUCE_ARITHMETIC_TYPES, int8_t, uint8_t>(init, "ReduceMax");
}
absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceMinKernel(const KernelInit& init) {
  return MakeReduceKernel<MinReducer, TRAIND_REDUCE_ARITHMETIC_TYPES, int8_t, uint8_t>(init, "ReduceMin");
}
// Square roots and logarithms of integers are not meaningful reductions: float types only.
absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceL2Kernel(const KernelInit& init) {
  return MakeReduceKernel<L2Reducer, TRAIND_FLOAT_TYPES>(init, "ReduceL2");
}
absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceLogSumKernel(const KernelInit& init) {
  return MakeReduceKernel<LogSumReducer, TRAIND_FLOAT_TYPES>(init, "ReduceLogSum");
}
absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceLogSumExpKernel(const KernelInit& init) {
  return MakeReduceKernel<LogSumExpReducer, TRAIND_FLOAT_TYPES>(init, "ReduceLogSumExp");
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateArgMaxKernel(const KernelInit& init) {
  return MakeArgExtremeKernel<true>(init);
}
absl::StatusOr<std::unique_ptr<Kernel>> CreateArgMinKernel(const KernelInit& init) {
  return MakeArgExtremeKernel<false>(init);
}

// Gradients of sum-like reductions: the output gradient, with the reduced axes restored (size 1), expanded
// back to the input's shape, and divided by the reduced element count for ReduceMean.
namespace {

// The same with dynamic dimensions (a symbolic batch): the reduced axes restored with Unsqueeze (keepdims 0), the
// expansion to x's run-time shape, and for the mean the count Size(x) / Size(y) at run time.
absl::Status SpreadReducedGradientDynamic(GradientRuleContext& g, std::vector<int64_t> axes, bool mean) {
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> partial_shape, g.PartialShape(g.I(0)));
  const int64_t rank = static_cast<int64_t>(partial_shape.size());
  if (axes.empty()) {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  for (int64_t& axis : axes) {
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return absl::InvalidArgumentError("reduction axis out of range");
  }
  std::sort(axes.begin(), axes.end());
  std::string kept = g.GO(0);
  if (g.IntAttr("keepdims", 1) == 0) {
    kept = g.Temp("dy_kept");
    g.Emit("Unsqueeze", {g.GO(0), g.Int64Constant(axes)}, {kept});
  }
  const std::string shape = g.Temp("x_shape");
  g.Emit("Shape", {g.I(0)}, {shape});
  if (!mean) {
    g.Emit("Expand", {kept, shape}, {g.GI(0)});
    return absl::OkStatus();
  }
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  const std::string expanded = g.Temp("dy_expanded"), x_size = g.Temp("x_size"), y_size = g.Temp("y_size"),
                    count = g.Temp("count"), count_cast = g.Temp("count_cast");
  g.Emit("Expand", {kept, shape}, {expanded});
  g.Emit("Size", {g.I(0)}, {x_size});
  g.Emit("Size", {g.O(0)}, {y_size});
  g.Emit("Div", {x_size, y_size}, {count});
  GradientRuleContext::SetIntAttr(g.Emit("Cast", {count}, {count_cast}), "to", type);
  g.Emit("Div", {expanded, count_cast}, {g.GI(0)});
  return absl::OkStatus();
}

absl::Status SpreadReducedGradient(GradientRuleContext& g, std::vector<int64_t> axes, bool mean) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  if (!g.StaticShape(g.I(0)).ok()) return SpreadReducedGradientDynamic(g, std::move(axes), mean);
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> input_shape, g.StaticShape(g.I(0)));
  const int64_t rank = static_cast<int64_t>(input_shape.size());
  if (axes.empty()) {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  std::vector<int64_t> kept_shape = input_shape;
  int64_t reduced_count = 1;
  for (int64_t& axis : axes) {
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return absl::InvalidArgumentError("reduction axis out of range");
    reduced_count *= input_shape[axis];
    kept_shape[axis] = 1;
  }
  const std::string reshaped = g.Temp("dy_kept");
  g.Emit("Reshape", {g.GO(0), g.Int64Constant(kept_shape)}, {reshaped});
  if (!mean) {
    g.Emit("Expand", {reshaped, g.Int64Constant(input_shape)}, {g.GI(0)});
    return absl::OkStatus();
  }
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  const std::string expanded = g.Temp("dy_expanded");
  g.Emit("Expand", {reshaped, g.Int64Constant(input_shape)}, {expanded});
  g.Emit("Div", {expanded, g.ScalarConstant(static_cast<double>(reduced_count), type)}, {g.GI(0)});
  return absl::OkStatus();
}

}  // namespace

// ReduceSum: axes from the attribute (opset < 13) or from the axes input (opset 13+), which must then be a
// constant of the graph.
absl::Status ReduceSumGradient(GradientRuleContext& g) {
  std::vector<int64_t> axes = g.IntsAttr("axes");
  if (g.num_inputs() > 1 && !g.I(1).empty()) {
    std::optional<std::vector<int64_t>> constant = g.ConstantInts(g.I(1));
    if (!constant.has_value()) {
      return absl::UnimplementedError("ReduceSum gradients need its axes input to be a constant");
    }
    axes = *constant;
  }
  if (axes.empty() && g.IntAttr("noop_with_empty_axes", 0) != 0) {
    if (g.NeedsGI(0)) g.Emit("Identity", {g.GO(0)}, {g.GI(0)});
    return absl::OkStatus();
  }
  return SpreadReducedGradient(g, axes, /*mean=*/false);
}

// ReduceMean (opset < 18): axes is an attribute.
absl::Status ReduceMeanGradient(GradientRuleContext& g) {
  return SpreadReducedGradient(g, g.IntsAttr("axes"), /*mean=*/true);
}

// The other reductions (axes attribute, opsets < 18): dx = spread(dy) * local derivative, where spread restores
// the reduced axes and expands to x's shape, and y_kept is the output with the reduced axes restored.
namespace {

struct Spread {
  std::string dy;      // dy expanded to x's shape
  std::string y_kept;  // y with the reduced axes kept (size 1), broadcastable against x
};

absl::StatusOr<Spread> SpreadOutputAndGradient(GradientRuleContext& g) {
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> input_shape, g.StaticShape(g.I(0)));
  const int64_t rank = static_cast<int64_t>(input_shape.size());
  std::vector<int64_t> axes = g.IntsAttr("axes");
  if (axes.empty()) {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  std::vector<int64_t> kept_shape = input_shape;
  for (int64_t axis : axes) kept_shape[axis < 0 ? axis + rank : axis] = 1;
  Spread spread{g.Temp("dy_spread"), g.Temp("y_kept")};
  const std::string dy_kept = g.Temp("dy_kept");
  g.Emit("Reshape", {g.GO(0), g.Int64Constant(kept_shape)}, {dy_kept});
  g.Emit("Expand", {dy_kept, g.Int64Constant(input_shape)}, {spread.dy});
  g.Emit("Reshape", {g.O(0), g.Int64Constant(kept_shape)}, {spread.y_kept});
  return spread;
}

}  // namespace

// ReduceSumSquare: dx = 2 x dy.
absl::Status ReduceSumSquareGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(Spread spread, SpreadOutputAndGradient(g));
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  const std::string twice = g.Temp("two_x");
  g.Emit("Mul", {g.I(0), g.ScalarConstant(2.0, type)}, {twice});
  g.Emit("Mul", {spread.dy, twice}, {g.GI(0)});
  return absl::OkStatus();
}

// ReduceL2: dx = x / y dy.
absl::Status ReduceL2Gradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(Spread spread, SpreadOutputAndGradient(g));
  const std::string ratio = g.Temp("x_over_y");
  g.Emit("Div", {g.I(0), spread.y_kept}, {ratio});
  g.Emit("Mul", {spread.dy, ratio}, {g.GI(0)});
  return absl::OkStatus();
}

// ReduceLogSumExp: dx = exp(x - y) dy (the softmax over the reduced axes).
absl::Status ReduceLogSumExpGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(Spread spread, SpreadOutputAndGradient(g));
  const std::string shifted = g.Temp("x_minus_y"), weights = g.Temp("softmax");
  g.Emit("Sub", {g.I(0), spread.y_kept}, {shifted});
  g.Emit("Exp", {shifted}, {weights});
  g.Emit("Mul", {spread.dy, weights}, {g.GI(0)});
  return absl::OkStatus();
}

// ReduceMax / ReduceMin: dy goes to the elements equal to the result, shared evenly among ties (as PyTorch's
// amax/amin).
absl::Status ReduceExtremumGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(Spread spread, SpreadOutputAndGradient(g));
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> input_shape, g.StaticShape(g.I(0)));
  const std::string hit = g.Temp("is_extremum"), mask = g.Temp("mask"), ties = g.Temp("ties"),
                    ties_spread = g.Temp("ties_spread"), share = g.Temp("share");
  g.Emit("Equal", {g.I(0), spread.y_kept}, {hit});
  GradientRuleContext::SetIntAttr(g.Emit("Cast", {hit}, {mask}), "to", type);
  const std::vector<int64_t> axes = g.IntsAttr("axes");
  std::vector<std::string> count_inputs = {mask};
  if (!axes.empty()) count_inputs.push_back(g.Int64Constant(axes));
  GradientRuleContext::SetIntAttr(g.Emit("ReduceSum", count_inputs, {ties}), "keepdims", 1);
  g.Emit("Expand", {ties, g.Int64Constant(input_shape)}, {ties_spread});
  g.Emit("Div", {mask, ties_spread}, {share});
  g.Emit("Mul", {spread.dy, share}, {g.GI(0)});
  return absl::OkStatus();
}

// ReduceL1: dx = sign(x) dy (0 at 0, as PyTorch's abs).
absl::Status ReduceL1Gradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(Spread spread, SpreadOutputAndGradient(g));
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  const std::string zero = g.ScalarConstant(0.0, type);
  const std::string positive = g.Temp("positive"), negative = g.Temp("negative"), positive_mask = g.Temp("plus"),
                    negative_mask = g.Temp("minus"), sign = g.Temp("sign");
  g.Emit("Greater", {g.I(0), zero}, {positive});
  g.Emit("Less", {g.I(0), zero}, {negative});
  GradientRuleContext::SetIntAttr(g.Emit("Cast", {positive}, {positive_mask}), "to", type);
  GradientRuleContext::SetIntAttr(g.Emit("Cast", {negative}, {negative_mask}), "to", type);
  g.Emit("Sub", {positive_mask, negative_mask}, {sign});
  g.Emit("Mul", {spread.dy, sign}, {g.GI(0)});
  return absl::OkStatus();
}

// ReduceLogSum: y = log(sum x), dx = dy / sum x = dy / exp(y).
absl::Status ReduceLogSumGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(Spread spread, SpreadOutputAndGradient(g));
  const std::string sum = g.Temp("sum");
  g.Emit("Exp", {spread.y_kept}, {sum});
  g.Emit("Div", {spread.dy, sum}, {g.GI(0)});
  return absl::OkStatus();
}

// ReduceProd: dx_i = dy * (product of the other elements of x_i's group), without dividing by x_i, which may be
// 0. With p the product of the group's non-zero elements and z its number of zeros:
//   x_i != 0: p / x_i when z = 0, else 0;     x_i == 0: p when z = 1, else 0.
absl::Status ReduceProdGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(Spread spread, SpreadOutputAndGradient(g));
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  const std::string zero = g.ScalarConstant(0.0, type), one = g.ScalarConstant(1.0, type);
  const std::string is_zero = g.Temp("is_zero"), zero_mask = g.Temp("zero_mask"), nonzero_x = g.Temp("nonzero_x"),
                    product = g.Temp("nonzero_product"), zeros = g.Temp("zero_count"), no_zero = g.Temp("no_zero"),
                    one_zero = g.Temp("one_zero"), no_zero_mask = g.Temp("no_zero_mask"),
                    one_zero_mask = g.Temp("one_zero_mask"), others = g.Temp("product_of_others"),
                    at_nonzero = g.Temp("at_nonzero"), at_zero = g.Temp("at_zero"), local = g.Temp("local");
  g.Emit("Equal", {g.I(0), zero}, {is_zero});
  GradientRuleContext::SetIntAttr(g.Emit("Cast", {is_zero}, {zero_mask}), "to", type);
  g.Emit("Where", {is_zero, one, g.I(0)}, {nonzero_x});
  const std::vector<int64_t> axes = g.IntsAttr("axes");
  onnx::NodeProto* prod = g.Emit("ReduceProd", {nonzero_x}, {product});
  if (!axes.empty()) GradientRuleContext::SetIntsAttr(prod, "axes", axes);
  GradientRuleContext::SetIntAttr(prod, "keepdims", 1);
  std::vector<std::string> count_inputs = {zero_mask};
  if (!axes.empty()) count_inputs.push_back(g.Int64Constant(axes));
  GradientRuleContext::SetIntAttr(g.Emit("ReduceSum", count_inputs, {zeros}), "keepdims", 1);
  g.Emit("Equal", {zeros, zero}, {no_zero});
  g.Emit("Equal", {zeros, one}, {one_zero});
  GradientRuleContext::SetIntAttr(g.Emit("Cast", {no_zero}, {no_zero_mask}), "to", type);
  GradientRuleContext::SetIntAttr(g.Emit("Cast", {one_zero}, {one_zero_mask}), "to", type);
  g.Emit("Div", {product, nonzero_x}, {others});
  g.Emit("Mul", {others, no_zero_mask}, {at_nonzero});
  g.Emit("Mul", {product, one_zero_mask}, {at_zero});
  g.Emit("Where", {is_zero, at_zero, at_nonzero}, {local});
  g.Emit("Mul", {spread.dy, local}, {g.GI(0)});
  return absl::OkStatus();
}

}  // namespace traind::engine
