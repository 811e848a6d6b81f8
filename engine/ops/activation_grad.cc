// Fused activation gradients (domain ai.traind.training), one pass each instead of a chain of standard ops with
// a temporary per step:
//   ReluGrad(dY, X) -> dX = dY where X > 0, else 0        (was Greater -> Cast -> Mul; X: Relu's input or,
//                                                          as the gradient rule passes it, its output)
//   ErfGrad(dY, X)  -> dX = dY * 2/sqrt(pi) * exp(-X^2)   (was Mul -> Neg -> Exp -> Mul -> Mul)
//   GeluGrad(dY, X) -> dX = dY * (Phi(X) + X * phi(X))    (the whole backward of exact GELU, which the gradient
//                                                          builder recognises in its exported decomposition)
// and exact GELU's forward beside its gradient, which a CPU plan makes of the same decomposition
// (engine/runtime/gelu_fusion.h):
//   Gelu(X)         -> Y = X * Phi(X) = X * (0.5 + 0.5 erf(X / sqrt(2)))
#include "engine/ops/activation_grad.h"

#include <cmath>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <memory>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/ops/fast_math.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

absl::Status CheckActivationGradInputs(const char* op, const Tensor& dy, const Tensor& x) {
  if (dy.shape() != x.shape() || dy.dtype() != x.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dY ", dy.DebugString(), " must match X ", x.DebugString()));
  }
  return absl::OkStatus();
}

namespace {

// Both operands are read unconditionally so that the loop vectorises (a select, no branch).
template <typename T>
void ReluGradRange(const T* __restrict dy, const T* __restrict x, T* __restrict dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T g = dy[i];
    dx[i] = x[i] > T(0) ? g : T(0);
  }
}

constexpr double kTwoOverSqrtPi = 1.1283791670955126;

void ErfGradRange(const float* __restrict dy, const float* __restrict x, float* __restrict dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * static_cast<float>(kTwoOverSqrtPi) * FastExp(-x[i] * x[i]);
}

void ErfGradRange(const double* __restrict dy, const double* __restrict x, double* __restrict dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * kTwoOverSqrtPi * std::exp(-x[i] * x[i]);
}

// GELU(x) = x * Phi(x) with Phi the standard normal CDF, 0.5 * (1 + erf(x / sqrt(2))); its slope is
// Phi(x) + x * phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
constexpr double kSqrtHalf = 0.70710678118654752;
constexpr double kInvSqrtTwoPi = 0.39894228040143268;

#if defined(__AVX512F__)
// GeluGrad's slope 16 lanes at a time: FastErf's fit with vmaxps / vminps clamps and ExpOfNonPositive512 (fast_math.h).
// GCC compiles the portable loop below into masked copies of the whole chain (one per side of each clamp), which ran
// GeluGrad at 0.24 ms per 1024 x 512 activation where this runs at 0.16 (1 thread, Zen 5). NaN in X gives NaN
// (through X * phi); X * phi(X) is 0 far out (the exponential rounds to 0 below -104).
inline __m512 ErfLanes(__m512 x) {
  x = _mm512_maskz_min_ps(0xFFFF, _mm512_maskz_max_ps(0xFFFF, x, Splat(-4.0f)), Splat(4.0f));
  const __m512 x2 = _mm512_mul_ps(x, x);
  __m512 p = Splat(-2.72614225801306e-10f);
  p = _mm512_fmadd_ps(p, x2, Splat(2.77068142495902e-08f));
  p = _mm512_fmadd_ps(p, x2, Splat(-2.10102402082508e-06f));
  p = _mm512_fmadd_ps(p, x2, Splat(-5.69250639462346e-05f));
  p = _mm512_fmadd_ps(p, x2, Splat(-7.34990630326855e-04f));
  p = _mm512_fmadd_ps(p, x2, Splat(-2.95459980854025e-03f));
  p = _mm512_fmadd_ps(p, x2, Splat(-1.60960333262415e-02f));
  p = _mm512_mul_ps(p, x);
  __m512 q = Splat(-1.45660718464996e-05f);
  q = _mm512_fmadd_ps(q, x2, Splat(-2.13374055278905e-04f));
  q = _mm512_fmadd_ps(q, x2, Splat(-1.68282697438203e-03f));
  q = _mm512_fmadd_ps(q, x2, Splat(-7.37332916720468e-03f));
  q = _mm512_fmadd_ps(q, x2, Splat(-1.42647390514189e-02f));
  return _mm512_div_ps(p, q);
}

// Phi(x) = 0.5 + 0.5 erf(x / sqrt(2)), the standard normal's distribution function, as GELU and its gradient use it.
inline __m512 GaussianCdfLanes(__m512 x) {
  return _mm512_fmadd_ps(ErfLanes(_mm512_mul_ps(x, Splat(static_cast<float>(kSqrtHalf)))), Splat(0.5f), Splat(0.5f));
}
#endif

// Phi(x) for the scalar loops and tails.
inline float GaussianCdf(float x) { return 0.5f * (1.0f + FastErf(x * static_cast<float>(kSqrtHalf))); }

void GeluGradRange(const float* __restrict dy, const float* __restrict x, float* __restrict dx, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 cdf = GaussianCdfLanes(v);
    const __m512 pdf = _mm512_mul_ps(Splat(static_cast<float>(kInvSqrtTwoPi)),
                                     ExpOfNonPositive512(_mm512_mul_ps(_mm512_mul_ps(Splat(-0.5f), v), v)));
    _mm512_storeu_ps(dx + i, _mm512_mul_ps(_mm512_loadu_ps(dy + i), _mm512_fmadd_ps(v, pdf, cdf)));
  }
#endif
  for (; i < n; ++i) {
    const float v = x[i];
    const float cdf = GaussianCdf(v);
    const float pdf = static_cast<float>(kInvSqrtTwoPi) * FastExpFullRange(-0.5f * v * v);
    dx[i] = dy[i] * (cdf + v * pdf);
  }
}

// Y = X * Phi(X), Phi as GeluGradRange computes it. The exported decomposition divides by sqrt(2) (vdivps: half of
// the fused chain's time, 0.1 ms per 1024 x 512 activation on a Zen 5 core) and makes five passes over each chunk.
void GeluRange(const float* __restrict x, float* __restrict y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    _mm512_storeu_ps(y + i, _mm512_mul_ps(v, GaussianCdfLanes(v)));
  }
#endif
  for (; i < n; ++i) {
    const float v = x[i];
    y[i] = v * GaussianCdf(v);
  }
}

void GeluGradRange(const double* __restrict dy, const double* __restrict x, double* __restrict dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    dx[i] = dy[i] * (0.5 * (1.0 + std::erf(v * kSqrtHalf)) + v * kInvSqrtTwoPi * std::exp(-0.5 * v * v));
  }
}

// dX from dY and X elementwise; `Range(dy, x, dx, n)` does a contiguous run.
class ElementwiseGradKernel final : public Kernel {
 public:
  using FloatRange = void (*)(const float*, const float*, float*, int64_t);
  using DoubleRange = void (*)(const double*, const double*, double*, int64_t);
  ElementwiseGradKernel(const char* name, FloatRange float_range, DoubleRange double_range)
      : name_(name), float_range_(float_range), double_range_(double_range) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* dy, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(1));
    TRAIND_RETURN_IF_ERROR(CheckActivationGradInputs(name_, *dy, *x));
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x->dtype(), name_, [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      TRAIND_ASSIGN_OR_RETURN(Tensor * dx, context.AllocateOutput(0, x->dtype(), x->shape()));
      const T* grad = dy->data<T>();
      const T* in = x->data<T>();
      T* out = dx->mutable_data<T>();
      context.threads().ParallelFor(x->num_elements(), kParallelElementThreshold, [&](int64_t begin, int64_t end) {
        if constexpr (std::is_same_v<T, float>) {
          float_range_(grad + begin, in + begin, out + begin, end - begin);
        } else {
          double_range_(grad + begin, in + begin, out + begin, end - begin);
        }
      });
      return absl::OkStatus();
    });
  }

 private:
  const char* name_;
  FloatRange float_range_;
  DoubleRange double_range_;
};

class GeluKernel final : public Kernel {
 public:
  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    if (x->dtype() != DataType::kFloat32) return UnsupportedDtype("Gelu", x->dtype());
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
    const float* in = x->data<float>();
    float* out = y->mutable_data<float>();
    context.threads().ParallelFor(x->num_elements(), kParallelElementThreshold, [&](int64_t begin, int64_t end) {
      GeluRange(in + begin, out + begin, end - begin);
    });
    return absl::OkStatus();
  }
};

class ReluGradKernel final : public Kernel {
 public:
  const ElementwiseFloatFn* elementwise_float() const override { return &fn_; }

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* dy, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(1));
    TRAIND_RETURN_IF_ERROR(CheckActivationGradInputs("ReluGrad", *dy, *x));
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x->dtype(), "ReluGrad", [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      TRAIND_ASSIGN_OR_RETURN(Tensor * dx, context.AllocateOutput(0, x->dtype(), x->shape()));
      const T* grad = dy->data<T>();
      const T* in = x->data<T>();
      T* out = dx->mutable_data<T>();
      context.threads().ParallelFor(x->num_elements(), kParallelElementThreshold, [&](int64_t begin, int64_t end) {
        ReluGradRange(grad + begin, in + begin, out + begin, end - begin);
      });
      return absl::OkStatus();
    });
  }

 private:
  // ReluGradRange's select for the fusion (a broadcast operand is one value for every position).
  class Fn final : public ElementwiseFloatFn {
   public:
    int arity() const override { return 2; }
    void Apply(const float* const* inputs, const bool* broadcast, int64_t n, float* out) const override {
      if (!broadcast[0] && !broadcast[1]) {
        ReluGradRange(inputs[0], inputs[1], out, n);
        return;
      }
      for (int64_t i = 0; i < n; ++i) {
        const float g = inputs[0][broadcast[0] ? 0 : i];
        out[i] = inputs[1][broadcast[1] ? 0 : i] > 0.0f ? g : 0.0f;
      }
    }
  };
  Fn fn_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateErfGradKernel(const KernelInit&) {
  return std::unique_ptr<Kernel>(new ElementwiseGradKernel("ErfGrad", &ErfGradRange, &ErfGradRange));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateGeluKernel(const KernelInit&) {
  return std::unique_ptr<Kernel>(new GeluKernel());
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateGeluGradKernel(const KernelInit&) {
  return std::unique_ptr<Kernel>(new ElementwiseGradKernel("GeluGrad", &GeluGradRange, &GeluGradRange));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateReluGradKernel(const KernelInit&) {
  return std::unique_ptr<Kernel>(new ReluGradKernel());
}

}  // namespace traind::engine
