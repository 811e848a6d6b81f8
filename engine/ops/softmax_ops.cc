// Softmax, LogSoftmax and Hardmax.
//
// Opsets 1-12 coerce the input to 2-D at `axis` (default 1): rows are dims [0, axis), the
// normalised row is the product of dims [axis, rank). Opset 13+ normalises along the single
// dimension `axis` (default -1). Both views reduce to [outer, n, inner] (axis_split.h); opset <13
// always has inner == 1.
//
// float Softmax runs on oneDNN's softmax primitive (vectorised exp), cached per [outer, n, inner];
// LogSoftmax, double and Hardmax use the loops below (softmax_slab.h). Not oneDNN's logsoftmax: its
// log(sum) is off by up to ~12 ulp (2.9e-6 absolute against a float64 reference on rows of 6-24
// values, softmax_ops_test.cc) where std::log is within one. All are numerically stable: the row
// maximum is subtracted before exp.
#include "engine/ops/softmax_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dnnl.hpp"
#include "engine/autodiff/gradient_rule.h"
#include "engine/core/status_macros.h"
#include "engine/model/traind_schemas.h"
#include "engine/ops/axis_split.h"
#include "engine/ops/softmax_slab.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

absl::StatusOr<SoftmaxAttributes> ParseSoftmaxAttributes(const KernelInit& init) {
  SoftmaxAttributes attributes;
  attributes.coerce_to_2d = init.opset() < 13;
  TRAIND_ASSIGN_OR_RETURN(attributes.axis, init.GetInt("axis", attributes.coerce_to_2d ? 1 : -1));
  return attributes;
}

absl::StatusOr<AxisSplit> SoftmaxSplit(const Tensor& x, const SoftmaxAttributes& attributes) {
  // A scalar has one element to normalise (the 2-D coercion of opset < 13 makes it [1, 1]).
  AxisSplit split;
  if (x.rank() == 0 && attributes.coerce_to_2d) return split;
  TRAIND_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(attributes.axis, x.rank()));
  if (!attributes.coerce_to_2d) return SplitAtAxis(x.shape(), axis);
  split.outer = DimProduct(x.shape(), 0, static_cast<size_t>(axis));
  split.axis_dim = DimProduct(x.shape(), static_cast<size_t>(axis), x.shape().size());
  return split;
}

namespace {

enum class SoftmaxKind { kSoftmax, kLogSoftmax, kHardmax };

const char* KindName(SoftmaxKind kind) {
  switch (kind) {
    case SoftmaxKind::kSoftmax:
      return "Softmax";
    case SoftmaxKind::kLogSoftmax:
      return "LogSoftmax";
    case SoftmaxKind::kHardmax:
      return "Hardmax";
  }
  return "";
}

// Hardmax of one [n, inner] slab: 1 at the first maximum along the axis, 0 elsewhere.
template <typename T>
void HardmaxSlab(const T* x, T* y, int64_t n, int64_t inner, int64_t count) {
  int64_t best[kSoftmaxInnerBlock];
  for (int64_t i = 0; i < count; ++i) best[i] = 0;
  for (int64_t a = 1; a < n; ++a) {
    for (int64_t i = 0; i < count; ++i) {
      if (x[a * inner + i] > x[best[i] * inner + i]) best[i] = a;
    }
  }
  for (int64_t a = 0; a < n; ++a) {
    for (int64_t i = 0; i < count; ++i) y[a * inner + i] = best[i] == a ? T(1) : T(0);
  }
}

// oneDNN softmax primitives keyed by [outer, n, inner]. Compute is const and may run
// concurrently, so the cache is guarded; executing one primitive from several threads at once is
// allowed by oneDNN (primitives hold no per-execution state).
class DnnlSoftmaxCache {
 public:
  absl::Status Run(const AxisSplit& split, const float* x, float* y) const {
    static dnnl::engine* cpu = new dnnl::engine(dnnl::engine::kind::cpu, 0);
    try {
      const dnnl::memory::desc md({split.outer, split.axis_dim, split.inner}, dnnl::memory::data_type::f32,
                                  dnnl::memory::format_tag::abc);
      const dnnl::primitive primitive = Get(split, md, *cpu);
      dnnl::memory src(md, *cpu, const_cast<float*>(x));  // oneDNN reads SRC only.
      dnnl::memory dst(md, *cpu, y);
      dnnl::stream stream(*cpu);
      primitive.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
      stream.wait();
    } catch (const dnnl::error& e) {
      return absl::InternalError(absl::StrCat("oneDNN softmax failed: ", e.what()));
    }
    return absl::OkStatus();
  }

 private:
  // Bounded so that a model fed ever-changing shapes cannot grow it without limit.
  static constexpr size_t kMaxCachedShapes = 32;
  using Key = std::tuple<int64_t, int64_t, int64_t>;

  dnnl::primitive Get(const AxisSplit& split, const dnnl::memory::desc& md, const dnnl::engine& cpu) const {
    const Key key{split.outer, split.axis_dim, split.inner};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = cache_.find(key);
      if (it != cache_.end()) return it->second;
    }
    const dnnl::primitive primitive = dnnl::softmax_forward(
        dnnl::softmax_forward::primitive_desc({dnnl::prop_kind::forward_inference, md, 1}, cpu));
    std::lock_guard<std::mutex> lock(mutex_);
    if (cache_.size() < kMaxCachedShapes) cache_.emplace(key, primitive);
    return primitive;
  }

  mutable std::mutex mutex_;
  mutable std::map<Key, dnnl::primitive> cache_;
};

class SoftmaxKernel final : public Kernel {
 public:
  SoftmaxKernel(SoftmaxKind kind, SoftmaxAttributes attributes) : kind_(kind), attributes_(attributes) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    const char* name = KindName(kind_);
    TRAIND_ASSIGN_OR_RETURN(const AxisSplit split, SoftmaxSplit(*x, attributes_));
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x->dtype(), name, [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
      if (y->num_elements() == 0) return absl::OkStatus();
      const T* in = x->data<T>();
      T* out = y->mutable_data<T>();
      if constexpr (std::is_same_v<T, float>) {
        // Rows along the last axis go to SoftmaxRows (softmax_slab.h): with AVX-512 twice as fast as oneDNN's
        // primitive on attention's short rows, and without it the same NaN rule (a NaN makes its row NaN; oneDNN's
        // primitive leaves a row with a NaN partly finite).
        if (kind_ == SoftmaxKind::kSoftmax && split.inner != 1) return dnnl_.Run(split, in, out);
        if (split.inner == 1 && kind_ != SoftmaxKind::kHardmax) {
          const int64_t n = split.axis_dim;
          context.threads().ParallelFor(split.outer, RowsPerChunk(n, kParallelElementThreshold / 8),
                                        [&](int64_t begin, int64_t end) {
                                          SoftmaxRows(in + begin * n, out + begin * n, end - begin, n,
                                                      kind_ == SoftmaxKind::kLogSoftmax);
                                        });
          return absl::OkStatus();
        }
      }
      const int64_t blocks_per_slab = (split.inner + kSoftmaxInnerBlock - 1) / kSoftmaxInnerBlock;
      const int64_t slab = split.axis_dim * split.inner;
      // One task = one block of inner positions of one outer index.
      context.threads().ParallelFor(split.outer * blocks_per_slab,
                                    RowsPerChunk(split.axis_dim * std::min(split.inner, kSoftmaxInnerBlock),
                                                 kParallelElementThreshold / 8),  // exp costs ~10 adds: split earlier.
                                    [&](int64_t begin, int64_t end) {
                                      for (int64_t task = begin; task < end; ++task) {
                                        const int64_t o = task / blocks_per_slab;
                                        const int64_t i0 = (task % blocks_per_slab) * kSoftmaxInnerBlock;
                                        const int64_t count = std::min(kSoftmaxInnerBlock, split.inner - i0);
                                        const T* x_slab = in + o * slab + i0;
                                        T* y_slab = out + o * slab + i0;
                                        if (kind_ == SoftmaxKind::kHardmax) {
                                          HardmaxSlab(x_slab, y_slab, split.axis_dim, split.inner, count);
                                        } else {
                                          SoftmaxSlab(x_slab, y_slab, split.axis_dim, split.inner, count,
                                                      kind_ == SoftmaxKind::kLogSoftmax);
                                        }
                                      }
                                    });
      return absl::OkStatus();
    });
  }

 private:
  SoftmaxKind kind_;
  SoftmaxAttributes attributes_;
  DnnlSoftmaxCache dnnl_;
};

// SoftmaxGrad (ai.traind.training): dX = Y * (dY - sum(dY * Y)) over the elements one normalisation covers, in one
// pass per normalisation (the products summed in float lanes, then each dX written), where the decomposition into
// Mul, ReduceSum, Sub and Mul made four passes over [.., n] and two temporaries: attention's [16, 4, 64, 64]
// scores' gradient 0.21 -> 0.06 ms on a Zen 5 core.
class SoftmaxGradKernel final : public Kernel {
 public:
  explicit SoftmaxGradKernel(SoftmaxAttributes attributes) : attributes_(attributes) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* dy, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* y, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const AxisSplit split, CheckSoftmaxGradInputs(*dy, *y, attributes_));
    return DispatchAmong<TRAIND_FLOAT_TYPES>(y->dtype(), "SoftmaxGrad", [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      TRAIND_ASSIGN_OR_RETURN(Tensor * dx, context.AllocateOutput(0, y->dtype(), y->shape()));
      if (dx->num_elements() == 0) return absl::OkStatus();
      const T* dy_data = dy->data<T>();
      const T* y_data = y->data<T>();
      T* dx_data = dx->mutable_data<T>();
      const int64_t n = split.axis_dim, inner = split.inner, slab = n * inner;
      context.threads().ParallelFor(split.outer, RowsPerChunk(slab, kParallelElementThreshold),
                                    [&](int64_t begin, int64_t end) {
                                      std::vector<T> sums(static_cast<size_t>(inner));
                                      for (int64_t o = begin; o < end; ++o) {
                                        SoftmaxGradSlab(dy_data + o * slab, y_data + o * slab, dx_data + o * slab, n,
                                                        inner, sums.data());
                                      }
                                    });
      return absl::OkStatus();
    });
  }

 private:
  // One [n, inner] slab; `sums` has room for inner values.
  template <typename T>
  static void SoftmaxGradSlab(const T* __restrict dy, const T* __restrict y, T* __restrict dx, int64_t n,
                              int64_t inner, T* __restrict sums) {
    if (inner == 1) {
      // A contiguous row: the sum in 16 lanes (vectorised), then added in order.
      constexpr int kLanes = 16;
      T lanes[kLanes] = {};
      int64_t a = 0;
      for (; a + kLanes <= n; a += kLanes) {
        for (int l = 0; l < kLanes; ++l) lanes[l] += dy[a + l] * y[a + l];
      }
      T sum = 0;
      for (; a < n; ++a) sum += dy[a] * y[a];
      for (int l = 0; l < kLanes; ++l) sum += lanes[l];
      for (a = 0; a < n; ++a) dx[a] = y[a] * (dy[a] - sum);
      return;
    }
    std::fill_n(sums, inner, T(0));
    for (int64_t a = 0; a < n; ++a) {
      for (int64_t i = 0; i < inner; ++i) sums[i] += dy[a * inner + i] * y[a * inner + i];
    }
    for (int64_t a = 0; a < n; ++a) {
      for (int64_t i = 0; i < inner; ++i) dx[a * inner + i] = y[a * inner + i] * (dy[a * inner + i] - sums[i]);
    }
  }

  SoftmaxAttributes attributes_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateSoftmaxFamilyKernel(const KernelInit& init, SoftmaxKind kind) {
  TRAIND_ASSIGN_OR_RETURN(SoftmaxAttributes attributes, ParseSoftmaxAttributes(init));
  return std::unique_ptr<Kernel>(new SoftmaxKernel(kind, attributes));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateSoftmaxKernel(const KernelInit& init) {
  return CreateSoftmaxFamilyKernel(init, SoftmaxKind::kSoftmax);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateLogSoftmaxKernel(const KernelInit& init) {
  return CreateSoftmaxFamilyKernel(init, SoftmaxKind::kLogSoftmax);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateHardmaxKernel(const KernelInit& init) {
  return CreateSoftmaxFamilyKernel(init, SoftmaxKind::kHardmax);
}

absl::StatusOr<SoftmaxAttributes> ParseSoftmaxGradAttributes(const KernelInit& init) {
  SoftmaxAttributes attributes;
  TRAIND_ASSIGN_OR_RETURN(attributes.axis, init.GetInt("axis", -1));
  TRAIND_ASSIGN_OR_RETURN(const int64_t coerce_to_2d, init.GetInt("coerce_to_2d", 0));
  attributes.coerce_to_2d = coerce_to_2d != 0;
  return attributes;
}

absl::StatusOr<AxisSplit> CheckSoftmaxGradInputs(const Tensor& dy, const Tensor& y,
                                                 const SoftmaxAttributes& attributes) {
  if (dy.shape() != y.shape() || dy.dtype() != y.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SoftmaxGrad: dY ", dy.DebugString(), " must have Y's shape and dtype, Y is ", y.DebugString()));
  }
  return SoftmaxSplit(y, attributes);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSoftmaxGradKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(SoftmaxAttributes attributes, ParseSoftmaxGradAttributes(init));
  return std::unique_ptr<Kernel>(new SoftmaxGradKernel(attributes));
}

namespace {

// The axes a softmax normalises over: `axis` alone from opset 13, `axis` and every later axis before (the
// input was coerced to 2-D at `axis`).
absl::StatusOr<std::vector<int64_t>> SoftmaxAxes(GradientRuleContext& g) {
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> shape, g.PartialShape(g.I(0)));
  const int64_t rank = static_cast<int64_t>(shape.size());
  TRAIND_ASSIGN_OR_RETURN(const int64_t axis, g.AxisAttr("axis", g.opset() >= 13 ? -1 : 1, rank));
  if (g.opset() >= 13) return std::vector<int64_t>{axis};
  std::vector<int64_t> axes;
  for (int64_t d = axis; d < rank; ++d) axes.push_back(d);
  return axes;
}

}  // namespace

// Softmax: dx = y * (dy - sum(dy * y)) over the normalised axes, one SoftmaxGrad node.
absl::Status SoftmaxGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  const bool coerce_to_2d = g.opset() < 13;
  onnx::NodeProto* node = g.Emit("SoftmaxGrad", {g.GO(0), g.O(0)}, {g.GI(0)});
  node->set_domain(kTraindTrainingDomain);
  GradientRuleContext::SetIntAttr(node, "axis", g.IntAttr("axis", coerce_to_2d ? 1 : -1));
  GradientRuleContext::SetIntAttr(node, "coerce_to_2d", coerce_to_2d ? 1 : 0);
  return absl::OkStatus();
}

// LogSoftmax: dx = dy - exp(y) * sum(dy) over the normalised axes.
absl::Status LogSoftmaxGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> axes, SoftmaxAxes(g));
  const std::string summed = g.Temp("sum_dy"), probabilities = g.Temp("p"), scaled = g.Temp("p_sum");
  g.Emit("ReduceSum", {g.GO(0), g.Int64Constant(axes)}, {summed});
  g.Emit("Exp", {g.O(0)}, {probabilities});
  g.Emit("Mul", {probabilities, summed}, {scaled});
  g.Emit("Sub", {g.GO(0), scaled}, {g.GI(0)});
  return absl::OkStatus();
}

}  // namespace traind::engine
