// ONNX's training optimizers, domain ai.onnx.preview.training version 1: Adam, Momentum (standard
// and Nesterov) and Adagrad, exactly as specified in onnx/defs/training/defs.cc (onnx 1.12).
//
// Layout (all three): inputs R (learning rate, float/double scalar), T (update count, int64
// scalar), then n parameters X_1..X_n, their gradients G_1..G_n and their state tensors (Adam: V...,
// H...; Momentum: V...; Adagrad: H...). Outputs X_new..., then the new state tensors in input order.
// Each parameter is updated by one fused pass that reads X, G and its state once and writes all of
// its outputs (ParallelFor over large tensors). Scalars (bias-corrected or decayed learning rate)
// are computed once per run in double. G and the states must have X's shape and dtype (the spec
// says "numpy broadcasting", but ONNX's shape inference gives each output its input's shape, and
// optimizer state always matches its parameter); other shapes are kUnimplemented.
//
// ---- ONNX Adam vs PyTorch AdamW (torch 1.13 torch/optim/adamw.py, amsgrad=False) ----
// With g the gradient, m/v the moments, b1/b2 the betas, t the 1-based step, lr, eps, wd:
//   PyTorch AdamW:                          ONNX Adam (alpha=b1, beta=b2, R=lr, T=t,
//                                                      norm_coefficient=0, norm_coefficient_post=c):
//   p1 = p * (1 - lr * wd)                  m' = b1 m + (1 - b1) g      (same)
//   m' = b1 m + (1 - b1) g                  v' = b2 v + (1 - b2) g^2    (same)
//   v' = b2 v + (1 - b2) g^2                x  = p - lr * sqrt(bc2) / bc1 * m' / (sqrt(v') + eps)
//   p' = p1 - lr / bc1 * m' / (sqrt(v') / sqrt(bc2) + eps)
//                                           p' = (1 - c) * x
//   where bc1 = 1 - b1^t, bc2 = 1 - b2^t.
// Differences, exactly:
//  1. Epsilon. Rewriting ONNX's step as lr / bc1 * m' / (sqrt(v') / sqrt(bc2) + eps / sqrt(bc2))
//     shows ONNX's eps sits inside the *bias-corrected* denominator divided by sqrt(bc2): ONNX with
//     eps_onnx equals torch with eps_torch = eps_onnx / sqrt(bc2). To match torch one would need
//     eps_onnx = eps_torch * sqrt(1 - b2^t), which changes every step (an attribute cannot). At
//     t = 1, b2 = 0.999: sqrt(bc2) = 0.0316, so the effective eps differs by 31.6x; this matters
//     wherever sqrt(v') is not >> eps (small or zero gradients, e.g. embeddings, early steps).
//  2. Weight decay. torch decays the *old* parameter before the step: p' = p(1 - lr wd) - s.
//     ONNX's norm_coefficient_post decays *after* the step: p' = (1 - c)(p - s) = p(1 - c) - (1 - c)s.
//     With c = lr * wd the results differ by exactly c * s (s = the Adam step), i.e. a relative
//     error of lr * wd in the update (1e-5 for lr 1e-3, wd 1e-2) that accumulates over steps. Also
//     c is a constant attribute while torch's factor follows the (scheduled) learning rate.
//     ONNX's norm_coefficient is *coupled* L2 (added to g before the moments): torch Adam's
//     weight_decay, not AdamW's.
//  3. Step count. torch always bias-corrects with the incremented step (t >= 1); ONNX skips bias
//     correction when T == 0, so pass T = t (1-based), never 0.
//  4. Precision of hyper-parameters. ONNX attributes are float32 (0.999f = 0.99900001287...), torch
//     computes b^t in double from Python floats: at t = 1, 1 - 0.999f differs from 1 - 0.999 by
//     1.3e-5 relative (6e-6 after the sqrt): inside 1e-4, but not bit-exact.
// Therefore traind's AdamW (issue 4, to match torch within 1e-4) must not be this op: it needs its
// own fused kernel (or a composed graph) that decays p before the step with a run-time learning
// rate and adds eps after dividing sqrt(v') by sqrt(bc2).
//
// ---- traind's AdamW and SGD (domain ai.traind.training, schemas in engine/model/traind_schemas.cc) ----
// The single node of GenerateArtifacts' optimizer model. Inputs learning_rate, step (1-based), then per
// parameter (p, gradient, states); outputs skipped, then per parameter (p', states'). The arithmetic is
// engine/training/optimizer.h's AdamWUpdate / SgdUpdate, the same code AdamWStep / SgdStep run. Before
// updating, one pass over every gradient computes the global L2 norm (float64 accumulation, fixed chunks:
// deterministic); a non-finite norm means a non-finite gradient, and then every output is its input and
// skipped is true. With max_grad_norm > 0 the gradients are scaled by min(1, max_norm / (norm + 1e-6))
// (torch.nn.utils.clip_grad_norm_). Parameters and states the caller donated (RunOptions in executor.h; the
// Optimizer donates them) are updated in place; the others are copied chunk by chunk into fresh outputs that are
// then updated in place. Nothing is written before every input has been checked and the norm computed.
//
// Where SGD and ONNX's Momentum coincide: Momentum(alpha = momentum, beta = 1 - dampening,
// norm_coefficient = weight_decay, mode standard / nesterov) with T = step - 1 and V = 0 before the first
// step computes torch.optim.SGD exactly: at T = 0 ONNX uses beta = 1, so V' = G_reg, which is torch's
// first-step buffer; afterwards V' = alpha V + beta G_reg is torch's buf update. (SGD without momentum is
// Momentum with alpha = 0, beta = 1.) optimizers_test.cc checks this step by step.
#include "engine/ops/optimizers.h"

#include <array>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/core/shape.h"
#include "engine/core/status_macros.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/kernel.h"
#include "engine/training/optimizer.h"

namespace traind::engine {
namespace {

// Elements per parallel chunk: each element reads 3-4 and writes 2-3 values plus a sqrt and a
// division, several times the work of a plain elementwise op, so a smaller grain pays.
constexpr int64_t kOptimizerGrain = kParallelElementThreshold / 4;

// Compile-time arity check: inputs R, T, then (2 + num_states) groups of n; outputs
// (1 + num_states) groups of n. Returns n.
absl::StatusOr<int> CountParameters(const KernelInit& init, int num_states, absl::string_view layout) {
  const int input_groups = 2 + num_states;
  const int output_groups = 1 + num_states;
  const int variadic = init.num_inputs() - 2;
  if (variadic <= 0 || variadic % input_groups != 0) {
    return init.Error(absl::StrCat("expects inputs ", layout, " (", input_groups,
                                   " tensors per optimized parameter after R and T); got ", init.num_inputs(),
                                   " inputs"));
  }
  const int n = variadic / input_groups;
  if (init.num_outputs() != n * output_groups) {
    return init.Error(absl::StrCat("optimizes ", n, " parameters, so it needs ", n * output_groups, " outputs; got ",
                                   init.num_outputs()));
  }
  for (int i = 0; i < init.num_inputs(); ++i) {
    if (!init.has_input(i)) return init.Error(absl::StrCat("input ", i, " must not be omitted"));
  }
  return n;
}

struct StepInputs {
  double learning_rate;  // R
  int64_t update_count;  // T
};

absl::StatusOr<StepInputs> ReadStepInputs(const KernelContext& context, absl::string_view op) {
  TRAIND_ASSIGN_OR_RETURN(const Tensor* r, context.RequiredInput(0));
  TRAIND_ASSIGN_OR_RETURN(const Tensor* t, context.RequiredInput(1));
  if (r->num_elements() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": learning rate R must be a scalar; got shape ", ShapeToString(r->shape())));
  }
  StepInputs step{};
  switch (r->dtype()) {
    case DataType::kFloat32:
      step.learning_rate = *r->data<float>();
      break;
    case DataType::kFloat64:
      step.learning_rate = *r->data<double>();
      break;
    default:
      return UnsupportedDtype(absl::StrCat(op, " R"), r->dtype());
  }
  if (t->dtype() != DataType::kInt64 || t->num_elements() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": update count T must be an int64 scalar; got ",
                                                   DataTypeName(t->dtype()), " of shape ", ShapeToString(t->shape())));
  }
  step.update_count = *t->data<int64_t>();
  if (step.update_count < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": update count T is ", step.update_count, ", expected >= 0"));
  }
  return step;
}

// For each of the n parameters: checks that its gradient and states (input groups 1..kIn-1) have
// X's dtype and shape, allocates its kOut outputs (output group k, same dtype and shape), and runs
// update(in, out, begin, end) over the elements in parallel chunks. in[k] / out[k] point at group
// k's tensor of this parameter. T is the C++ type of X's dtype.
template <typename T, int kIn, int kOut, typename Update>
absl::Status UpdateEachParameter(KernelContext& context, absl::string_view op, int n, const Update& update) {
  for (int p = 0; p < n; ++p) {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(2 + p));
    std::array<const T*, kIn> in;
    for (int k = 0; k < kIn; ++k) {
      TRAIND_ASSIGN_OR_RETURN(const Tensor* tensor, context.RequiredInput(2 + k * n + p));
      if (tensor->dtype() != x->dtype()) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": input ", 2 + k * n + p, " is ",
                                                       DataTypeName(tensor->dtype()), " but parameter ", p, " (input ",
                                                       2 + p, ") is ", DataTypeName(x->dtype())));
      }
      if (tensor->shape() != x->shape()) {
        return absl::UnimplementedError(absl::StrCat(
            op, ": input ", 2 + k * n + p, " has shape ", ShapeToString(tensor->shape()), " but parameter ", p,
            " has shape ", ShapeToString(x->shape()), "; broadcasting optimizer inputs is not supported"));
      }
      in[k] = tensor->data<T>();
    }
    std::array<T*, kOut> out;
    for (int k = 0; k < kOut; ++k) {
      TRAIND_ASSIGN_OR_RETURN(Tensor * tensor, context.AllocateOutput(k * n + p, x->dtype(), x->shape()));
      out[k] = tensor->mutable_data<T>();
    }
    context.threads().ParallelFor(x->num_elements(), kOptimizerGrain,
                                  [&](int64_t begin, int64_t end) { update(in, out, begin, end); });
  }
  return absl::OkStatus();
}

// The fused per-element loops. Free functions with __restrict pointers and by-value scalars so that
// GCC vectorises them (scalars captured by reference in a lambda are reloaded after every store,
// which defeats vectorisation); the file is built with -fno-math-errno (.bazelrc) so that std::sqrt
// vectorises too.
template <typename T>
struct AdamScalars {
  T norm_coefficient, alpha, one_minus_alpha, beta, one_minus_beta, epsilon, rate, keep;
};

template <typename T>
void AdamRange(const T* __restrict x, const T* __restrict g, const T* __restrict v, const T* __restrict h,
               T* __restrict x_new, T* __restrict v_new, T* __restrict h_new, const AdamScalars<T> s, int64_t begin,
               int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const T g_reg = s.norm_coefficient * x[i] + g[i];
    const T v_i = s.alpha * v[i] + s.one_minus_alpha * g_reg;
    const T h_i = s.beta * h[i] + s.one_minus_beta * (g_reg * g_reg);
    x_new[i] = s.keep * (x[i] - s.rate * v_i / (std::sqrt(h_i) + s.epsilon));
    v_new[i] = v_i;
    h_new[i] = h_i;
  }
}

template <typename T>
struct MomentumScalars {
  T norm_coefficient, alpha, beta, rate;  // beta already adjusted for T == 0.
};

template <typename T>
void StandardMomentumRange(const T* __restrict x, const T* __restrict g, const T* __restrict v, T* __restrict x_new,
                           T* __restrict v_new, const MomentumScalars<T> s, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const T v_i = s.alpha * v[i] + s.beta * (s.norm_coefficient * x[i] + g[i]);
    x_new[i] = x[i] - s.rate * v_i;
    v_new[i] = v_i;
  }
}

template <typename T>
void NesterovMomentumRange(const T* __restrict x, const T* __restrict g, const T* __restrict v, T* __restrict x_new,
                           T* __restrict v_new, const MomentumScalars<T> s, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const T g_reg = s.norm_coefficient * x[i] + g[i];
    const T v_i = s.alpha * v[i] + s.beta * g_reg;
    x_new[i] = x[i] - s.rate * (g_reg + s.alpha * v_i);
    v_new[i] = v_i;
  }
}

template <typename T>
struct AdagradScalars {
  T norm_coefficient, epsilon, rate;  // rate already decayed.
};

template <typename T>
void AdagradRange(const T* __restrict x, const T* __restrict g, const T* __restrict h, T* __restrict x_new,
                  T* __restrict h_new, const AdagradScalars<T> s, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const T g_reg = s.norm_coefficient * x[i] + g[i];
    const T h_i = h[i] + g_reg * g_reg;
    x_new[i] = x[i] - s.rate * g_reg / (std::sqrt(h_i) + s.epsilon);
    h_new[i] = h_i;
  }
}

// ---- Adam ----
// G_reg = norm_coefficient * X + G
// V_new = alpha * V + (1 - alpha) * G_reg
// H_new = beta * H + (1 - beta) * G_reg * G_reg
// R_adj = T > 0 ? R * sqrt(1 - beta^T) / (1 - alpha^T) : R
// X_new = (1 - norm_coefficient_post) * (X - R_adj * V_new / (sqrt(H_new) + epsilon))
class AdamKernel final : public Kernel {
 public:
  AdamKernel(int n, float alpha, float beta, float epsilon, float norm_coefficient, float norm_coefficient_post)
      : n_(n),
        alpha_(alpha),
        beta_(beta),
        epsilon_(epsilon),
        norm_coefficient_(norm_coefficient),
        norm_coefficient_post_(norm_coefficient_post) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(StepInputs step, ReadStepInputs(context, "Adam"));
    double adjusted_rate = step.learning_rate;
    if (step.update_count > 0) {
      const double t = static_cast<double>(step.update_count);
      adjusted_rate *= std::sqrt(1.0 - std::pow(double{beta_}, t)) / (1.0 - std::pow(double{alpha_}, t));
    }
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x0, context.RequiredInput(2));
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x0->dtype(), "Adam", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const AdamScalars<T> scalars{
          static_cast<T>(norm_coefficient_),    static_cast<T>(alpha_),
          static_cast<T>(1.0 - double{alpha_}), static_cast<T>(beta_),
          static_cast<T>(1.0 - double{beta_}),  static_cast<T>(epsilon_),
          static_cast<T>(adjusted_rate),        static_cast<T>(1.0 - double{norm_coefficient_post_})};
      return UpdateEachParameter<T, 4, 3>(
          context, "Adam", n_,
          [&](const std::array<const T*, 4>& in, const std::array<T*, 3>& out, int64_t begin, int64_t end) {
            AdamRange<T>(in[0], in[1], in[2], in[3], out[0], out[1], out[2], scalars, begin, end);
          });
    });
  }

 private:
  int n_;
  float alpha_, beta_, epsilon_, norm_coefficient_, norm_coefficient_post_;
};

// ---- Momentum ----
// G_reg = norm_coefficient * X + G
// V_new = alpha * V + (T > 0 ? beta : 1) * G_reg
// standard: X_new = X - R * V_new
// nesterov: X_new = X - R * (G_reg + alpha * V_new)
class MomentumKernel final : public Kernel {
 public:
  MomentumKernel(int n, float alpha, float beta, bool nesterov, float norm_coefficient)
      : n_(n), alpha_(alpha), beta_(beta), nesterov_(nesterov), norm_coefficient_(norm_coefficient) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(StepInputs step, ReadStepInputs(context, "Momentum"));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x0, context.RequiredInput(2));
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x0->dtype(), "Momentum", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const MomentumScalars<T> scalars{static_cast<T>(norm_coefficient_), static_cast<T>(alpha_),
                                       step.update_count > 0 ? static_cast<T>(beta_) : T(1),
                                       static_cast<T>(step.learning_rate)};
      const bool nesterov = nesterov_;
      return UpdateEachParameter<T, 3, 2>(
          context, "Momentum", n_,
          [&](const std::array<const T*, 3>& in, const std::array<T*, 2>& out, int64_t begin, int64_t end) {
            if (nesterov) {
              NesterovMomentumRange<T>(in[0], in[1], in[2], out[0], out[1], scalars, begin, end);
            } else {
              StandardMomentumRange<T>(in[0], in[1], in[2], out[0], out[1], scalars, begin, end);
            }
          });
    });
  }

 private:
  int n_;
  float alpha_, beta_;
  bool nesterov_;
  float norm_coefficient_;
};

// ---- Adagrad ----
// r = R / (1 + T * decay_factor)
// G_reg = norm_coefficient * X + G
// H_new = H + G_reg * G_reg
// X_new = X - r * G_reg / (sqrt(H_new) + epsilon)
class AdagradKernel final : public Kernel {
 public:
  AdagradKernel(int n, float decay_factor, float epsilon, float norm_coefficient)
      : n_(n), decay_factor_(decay_factor), epsilon_(epsilon), norm_coefficient_(norm_coefficient) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(StepInputs step, ReadStepInputs(context, "Adagrad"));
    const double decayed_rate =
        step.learning_rate / (1.0 + static_cast<double>(step.update_count) * double{decay_factor_});
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x0, context.RequiredInput(2));
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x0->dtype(), "Adagrad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const AdagradScalars<T> scalars{static_cast<T>(norm_coefficient_), static_cast<T>(epsilon_),
                                      static_cast<T>(decayed_rate)};
      return UpdateEachParameter<T, 3, 2>(
          context, "Adagrad", n_,
          [&](const std::array<const T*, 3>& in, const std::array<T*, 2>& out, int64_t begin, int64_t end) {
            AdagradRange<T>(in[0], in[1], in[2], out[0], out[1], scalars, begin, end);
          });
    });
  }

 private:
  int n_;
  float decay_factor_, epsilon_, norm_coefficient_;
};

// ---- AdamW / SGD (ai.traind.training) ----

// Gradients are summed in chunks of this many elements (fixed, so the norm does not depend on the thread
// count).
constexpr int64_t kNormChunk = 1 << 14;

// The sum of squares of n floats in float64, in 32 interleaved partial sums (a fixed order, so deterministic) that
// GCC keeps in vector registers: a single running sum would be one dependent addition per element, and 16 sums
// (two 8-double vectors) still waited on the adds' latency: the mlp workload's 670k gradients took 42 us on a Zen 5
// core with 16 sums, 27 with 32 (the float-to-double conversions then bound it; 64 gain nothing more).
double ChunkSumOfSquares(const float* __restrict g, int64_t n) {
  constexpr int kLanes = 32;
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += static_cast<double>(g[i + l]) * g[i + l];
  }
  for (; i < n; ++i) lanes[0] += static_cast<double>(g[i]) * g[i];
  double sum = 0;
  for (double lane : lanes) sum += lane;
  return sum;
}

class FusedOptimizerKernel : public Kernel {
 public:
  FusedOptimizerKernel(int parameters, int states, float max_grad_norm)
      : parameters_(parameters), states_(states), max_grad_norm_(max_grad_norm) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const FusedOptimizerInputs checked,
                            CheckFusedOptimizerInputs(name(), context.inputs(), parameters_, states_));
    const std::vector<std::vector<const Tensor*>>& tensors = checked.tensors;
    const int group = 2 + states_;
    const double sum_of_squares = SumOfSquares(context, tensors);
    TRAIND_ASSIGN_OR_RETURN(Tensor * skipped, context.AllocateOutput(0, DataType::kBool, Shape{}));
    // Every float32 square is below 2^256, so the float64 sum overflows for no realistic count: the sum is not
    // finite exactly when some gradient element is not.
    if (!std::isfinite(sum_of_squares)) {
      *skipped->mutable_data<uint8_t>() = 1;
      for (int p = 0; p < parameters_; ++p) {
        context.SetOutput(1 + p * (1 + states_), *tensors[p][0]);
        for (int s = 0; s < states_; ++s) context.SetOutput(1 + p * (1 + states_) + 1 + s, *tensors[p][2 + s]);
      }
      return absl::OkStatus();
    }
    *skipped->mutable_data<uint8_t>() = 0;
    float gradient_scale = 1.0f;
    if (max_grad_norm_ > 0.0f) {
      // torch.nn.utils.clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6), clamped to at most 1.
      const float total_norm = static_cast<float>(std::sqrt(sum_of_squares));
      const float clip = max_grad_norm_ / (total_norm + 1e-6f);
      gradient_scale = std::min(clip, 1.0f);
    }
    const float learning_rate = checked.learning_rate;
    const int64_t step_number = checked.step;
    for (int p = 0; p < parameters_; ++p) {
      // Each updated tensor (p', states') is its input's buffer when the caller donated it (an Optimizer updating
      // its CheckpointState in place), else a fresh one that starts as a copy of the input.
      std::vector<float*> targets;
      std::vector<const float*> copy_from;
      for (int k = 0; k < 1 + states_; ++k) {
        const int input = 2 + p * group + (k == 0 ? 0 : 1 + k);
        const int output = 1 + p * (1 + states_) + k;
        Tensor* target = context.ReuseInputAsOutput(input, output);
        copy_from.push_back(target == nullptr ? tensors[p][k == 0 ? 0 : 1 + k]->data<float>() : nullptr);
        if (target == nullptr) {
          TRAIND_ASSIGN_OR_RETURN(target, context.AllocateOutput(output, DataType::kFloat32, tensors[p][0]->shape()));
        }
        targets.push_back(target->mutable_data<float>());
      }
      Update(context, learning_rate, step_number, gradient_scale, tensors[p][1]->data<float>(), copy_from, targets,
             tensors[p][0]->num_elements());
    }
    return absl::OkStatus();
  }

 protected:
  virtual const char* name() const = 0;
  // Updates targets (p, then the states) in place from the gradient, over n elements; a target whose copy_from
  // entry is not null is a fresh buffer that must first take that input's values.
  virtual void Update(KernelContext& context, float learning_rate, int64_t step, float gradient_scale,
                      const float* gradient, const std::vector<const float*>& copy_from,
                      const std::vector<float*>& targets, int64_t n) const = 0;

  // Runs update(begin, end) over [0, n) in parallel chunks, each chunk first copying what copy_from asks for, so
  // that the update always runs in place on data its thread just touched.
  template <typename RangeUpdate>
  static void InPlaceChunks(KernelContext& context, int64_t n, const std::vector<const float*>& copy_from,
                            const std::vector<float*>& targets, const RangeUpdate& update) {
    context.threads().ParallelFor(n, kOptimizerGrain, [&](int64_t begin, int64_t end) {
      for (size_t k = 0; k < targets.size(); ++k) {
        if (copy_from[k] != nullptr) {
          std::memcpy(targets[k] + begin, copy_from[k] + begin, static_cast<size_t>(end - begin) * sizeof(float));
        }
      }
      update(begin, end);
    });
  }

 private:
  double SumOfSquares(KernelContext& context, const std::vector<std::vector<const Tensor*>>& tensors) const {
    double total = 0;
    for (const auto& parameter : tensors) {
      const float* g = parameter[1]->data<float>();
      const int64_t n = parameter[1]->num_elements();
      const int64_t chunks = (n + kNormChunk - 1) / kNormChunk;
      std::vector<double> partial(chunks, 0.0);
      context.threads().ParallelFor(chunks, std::max<int64_t>(1, kOptimizerGrain / kNormChunk),
                                    [&](int64_t begin, int64_t end) {
                                      for (int64_t c = begin; c < end; ++c) {
                                        partial[c] = ChunkSumOfSquares(g + c * kNormChunk,
                                                                       std::min(n - c * kNormChunk, kNormChunk));
                                      }
                                    });
      for (double sum : partial) total += sum;
    }
    return total;
  }

  int parameters_;
  int states_;
  float max_grad_norm_;
};

class AdamWKernel final : public FusedOptimizerKernel {
 public:
  AdamWKernel(int parameters, float max_grad_norm, AdamWOptions options)
      : FusedOptimizerKernel(parameters, 2, max_grad_norm), options_(options) {}

 protected:
  const char* name() const override { return "AdamW"; }
  void Update(KernelContext& context, float learning_rate, int64_t step, float gradient_scale, const float* gradient,
              const std::vector<const float*>& copy_from, const std::vector<float*>& targets,
              int64_t n) const override {
    AdamWOptions options = options_;
    options.lr = learning_rate;
    const AdamWStepScalars scalars = MakeAdamWStepScalars(options, step);
    InPlaceChunks(context, n, copy_from, targets, [&](int64_t begin, int64_t end) {
      AdamWUpdate(scalars, gradient_scale, targets[0], gradient, targets[1], targets[2], begin, end);
    });
  }

 private:
  AdamWOptions options_;
};

class SgdKernel final : public FusedOptimizerKernel {
 public:
  SgdKernel(int parameters, float max_grad_norm, SgdOptions options)
      : FusedOptimizerKernel(parameters, options.momentum != 0.0f ? 1 : 0, max_grad_norm), options_(options) {}

 protected:
  const char* name() const override { return "SGD"; }
  void Update(KernelContext& context, float learning_rate, int64_t step, float gradient_scale, const float* gradient,
              const std::vector<const float*>& copy_from, const std::vector<float*>& targets,
              int64_t n) const override {
    SgdOptions options = options_;
    options.lr = learning_rate;
    float* buffer = options.momentum != 0.0f ? targets[1] : nullptr;
    InPlaceChunks(context, n, copy_from, targets, [&](int64_t begin, int64_t end) {
      SgdUpdate(options, step == 1, gradient_scale, targets[0], gradient, buffer, begin, end);
    });
  }

 private:
  SgdOptions options_;
};

// The parameter count of a fused optimizer node with `states` state tensors per parameter.
absl::StatusOr<int> CountFusedParameters(const KernelInit& init, int states) {
  const int group = 2 + states;
  const int variadic = init.num_inputs() - 2;
  if (variadic <= 0 || variadic % group != 0) {
    return init.Error(absl::StrCat("expects inputs learning_rate, step, then ", group, " tensors per parameter; got ",
                                   init.num_inputs(), " inputs"));
  }
  const int n = variadic / group;
  if (init.num_outputs() != 1 + n * (1 + states)) {
    return init.Error(absl::StrCat("updates ", n, " parameters, so it needs ", 1 + n * (1 + states),
                                   " outputs (skipped first); got ", init.num_outputs()));
  }
  for (int i = 0; i < init.num_inputs(); ++i) {
    if (!init.has_input(i)) return init.Error(absl::StrCat("input ", i, " must not be omitted"));
  }
  return n;
}

absl::StatusOr<float> NonNegativeAttribute(const KernelInit& init, const char* name, float fallback) {
  TRAIND_ASSIGN_OR_RETURN(float value, init.GetFloat(name, fallback));
  if (!(value >= 0.0f) || !std::isfinite(value)) {
    return init.Error(absl::StrCat("attribute '", name, "' must be finite and >= 0"));
  }
  return value;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateAdamKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int n, CountParameters(init, 2, "R, T, X..., G..., V..., H..."));
  // Defaults from the ONNX schema.
  TRAIND_ASSIGN_OR_RETURN(float alpha, init.GetFloat("alpha", 0.9f));
  TRAIND_ASSIGN_OR_RETURN(float beta, init.GetFloat("beta", 0.999f));
  TRAIND_ASSIGN_OR_RETURN(float epsilon, init.GetFloat("epsilon", 1e-6f));
  TRAIND_ASSIGN_OR_RETURN(float norm_coefficient, init.GetFloat("norm_coefficient", 0.0f));
  TRAIND_ASSIGN_OR_RETURN(float norm_coefficient_post, init.GetFloat("norm_coefficient_post", 0.0f));
  return std::unique_ptr<Kernel>(new AdamKernel(n, alpha, beta, epsilon, norm_coefficient, norm_coefficient_post));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateMomentumKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int n, CountParameters(init, 1, "R, T, X..., G..., V..."));
  // All four attributes are required by the ONNX schema.
  TRAIND_ASSIGN_OR_RETURN(float alpha, init.GetFloat("alpha", std::nullopt));
  TRAIND_ASSIGN_OR_RETURN(float beta, init.GetFloat("beta", std::nullopt));
  TRAIND_ASSIGN_OR_RETURN(float norm_coefficient, init.GetFloat("norm_coefficient", std::nullopt));
  TRAIND_ASSIGN_OR_RETURN(std::string mode, init.GetString("mode", std::nullopt));
  if (mode != "standard" && mode != "nesterov") {
    return init.Error(absl::StrCat("attribute 'mode' is '", mode, "', expected 'standard' or 'nesterov'"));
  }
  return std::unique_ptr<Kernel>(new MomentumKernel(n, alpha, beta, mode == "nesterov", norm_coefficient));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateAdagradKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int n, CountParameters(init, 1, "R, T, X..., G..., H..."));
  TRAIND_ASSIGN_OR_RETURN(float decay_factor, init.GetFloat("decay_factor", 0.0f));
  TRAIND_ASSIGN_OR_RETURN(float epsilon, init.GetFloat("epsilon", 1e-6f));
  TRAIND_ASSIGN_OR_RETURN(float norm_coefficient, init.GetFloat("norm_coefficient", 0.0f));
  return std::unique_ptr<Kernel>(new AdagradKernel(n, decay_factor, epsilon, norm_coefficient));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateAdamWKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(FusedAdamWAttributes attributes, ParseFusedAdamWAttributes(init));
  return std::unique_ptr<Kernel>(new AdamWKernel(attributes.parameters, attributes.max_grad_norm, attributes.options));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSgdKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(FusedSgdAttributes attributes, ParseFusedSgdAttributes(init));
  return std::unique_ptr<Kernel>(new SgdKernel(attributes.parameters, attributes.max_grad_norm, attributes.options));
}

absl::StatusOr<FusedAdamWAttributes> ParseFusedAdamWAttributes(const KernelInit& init) {
  FusedAdamWAttributes attributes;
  TRAIND_ASSIGN_OR_RETURN(attributes.parameters, CountFusedParameters(init, 2));
  AdamWOptions& options = attributes.options;  // Defaults as in the schema (torch.optim.AdamW's, weight decay 0).
  TRAIND_ASSIGN_OR_RETURN(options.beta1, init.GetFloat("beta1", 0.9f));
  TRAIND_ASSIGN_OR_RETURN(options.beta2, init.GetFloat("beta2", 0.999f));
  TRAIND_ASSIGN_OR_RETURN(options.eps, NonNegativeAttribute(init, "epsilon", 1e-8f));
  TRAIND_ASSIGN_OR_RETURN(options.weight_decay, NonNegativeAttribute(init, "weight_decay", 0.0f));
  TRAIND_ASSIGN_OR_RETURN(int64_t bias_correction, init.GetInt("bias_correction", 1));
  options.bias_correction = bias_correction != 0;
  if (!(options.beta1 >= 0.0f && options.beta1 < 1.0f && options.beta2 >= 0.0f && options.beta2 < 1.0f)) {
    return init.Error("beta1 and beta2 must lie in [0, 1)");
  }
  TRAIND_ASSIGN_OR_RETURN(attributes.max_grad_norm, NonNegativeAttribute(init, "max_grad_norm", 0.0f));
  return attributes;
}

absl::StatusOr<FusedSgdAttributes> ParseFusedSgdAttributes(const KernelInit& init) {
  FusedSgdAttributes attributes;
  SgdOptions& options = attributes.options;
  TRAIND_ASSIGN_OR_RETURN(options.momentum, NonNegativeAttribute(init, "momentum", 0.0f));
  TRAIND_ASSIGN_OR_RETURN(options.dampening, init.GetFloat("dampening", 0.0f));
  TRAIND_ASSIGN_OR_RETURN(int64_t nesterov, init.GetInt("nesterov", 0));
  options.nesterov = nesterov != 0;
  TRAIND_ASSIGN_OR_RETURN(options.weight_decay, NonNegativeAttribute(init, "weight_decay", 0.0f));
  if (options.nesterov && (options.momentum <= 0.0f || options.dampening != 0.0f)) {
    return init.Error("Nesterov momentum requires momentum > 0 and zero dampening");
  }
  TRAIND_ASSIGN_OR_RETURN(attributes.parameters, CountFusedParameters(init, attributes.states()));
  TRAIND_ASSIGN_OR_RETURN(attributes.max_grad_norm, NonNegativeAttribute(init, "max_grad_norm", 0.0f));
  return attributes;
}

absl::StatusOr<FusedOptimizerInputs> CheckFusedOptimizerInputs(const char* op, absl::Span<const Tensor* const> inputs,
                                                               int parameters, int states) {
  const int group = 2 + states;
  if (static_cast<int64_t>(inputs.size()) != 2 + static_cast<int64_t>(parameters) * group) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", inputs.size(), " inputs for ", parameters, " parameters"));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": input ", i, " is missing"));
  }
  const Tensor& lr = *inputs[0];
  const Tensor& step = *inputs[1];
  if (lr.dtype() != DataType::kFloat32 || lr.num_elements() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": learning_rate must be a float scalar"));
  }
  if (step.dtype() != DataType::kInt64 || step.num_elements() != 1 || *step.data<int64_t>() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": step must be an int64 scalar >= 1 (the 1-based step being taken)"));
  }
  FusedOptimizerInputs checked;
  checked.learning_rate = *lr.data<float>();
  checked.step = *step.data<int64_t>();
  checked.tensors.resize(static_cast<size_t>(parameters));
  for (int p = 0; p < parameters; ++p) {
    for (int k = 0; k < group; ++k) {
      const int index = 2 + p * group + k;
      const Tensor* tensor = inputs[index];
      if (tensor->dtype() != DataType::kFloat32) {
        return absl::UnimplementedError(
            absl::StrCat(op, ": input ", index, " is ", DataTypeName(tensor->dtype()), "; only float32 is supported"));
      }
      if (k > 0 && tensor->shape() != checked.tensors[p][0]->shape()) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": input ", index, " has shape ",
                                                       ShapeToString(tensor->shape()), " but its parameter has ",
                                                       ShapeToString(checked.tensors[p][0]->shape())));
      }
      checked.tensors[p].push_back(tensor);
    }
  }
  return checked;
}

}  // namespace traind::engine
