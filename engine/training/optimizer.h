// Parameter updates with PyTorch 1.13's exact semantics (torch.optim.AdamW and torch.optim.SGD), applied in place
// to float32 parameters. Moments are named per parameter as in ONNX Runtime's checkpoints: "momentum0" (first
// moment / SGD momentum buffer) and "momentum1" (second moment).
#ifndef TRAIND_ENGINE_TRAINING_OPTIMIZER_H_
#define TRAIND_ENGINE_TRAINING_OPTIMIZER_H_

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/tensor.h"

namespace traind::engine {

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;
  bool bias_correction = true;
};

struct SgdOptions {
  float lr = 1e-2f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  bool nesterov = false;
  float weight_decay = 0.0f;
};

// ---- The element-wise updates, shared by AdamWStep / SgdStep below and the fused AdamW / SGD ops of the optimizer
// model (engine/ops/optimizers.cc): one implementation of PyTorch's arithmetic. They update in place (the parameter
// and its state tensors are read and written through the same pointer), take their scalars by value and their
// pointers __restrict (the tensors are distinct), so that GCC vectorises the loop in each caller's translation unit
// (by-reference scalars are reloaded after every store, and possibly aliasing pointers keep the loop scalar: a
// division and a square root per element then cost ~4 ns). ----

// The scalars of one AdamW step (computed once per step, in double as PyTorch does from Python floats).
struct AdamWStepScalars {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  float decay;       // 1 - lr * weight_decay
  float step_size;   // lr / (1 - beta1^t)
  float bias2_sqrt;  // sqrt(1 - beta2^t)
};
// `step` >= 1 (checked by the callers).
AdamWStepScalars MakeAdamWStepScalars(const AdamWOptions& options, int64_t step);

// torch.optim.AdamW (1.13, foreach=False) on elements [begin, end), the gradient first multiplied by
// `gradient_scale` (global-norm clipping; exactly 1 when off):
//   p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
inline void AdamWUpdate(const AdamWStepScalars s, const float gradient_scale, float* __restrict p,
                        const float* __restrict g, float* __restrict m, float* __restrict v, int64_t begin,
                        int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float gradient = g[i] * gradient_scale;
    const float decayed = p[i] * s.decay;
    const float m_i = s.beta1 * m[i] + s.one_minus_beta1 * gradient;
    const float v_i = s.beta2 * v[i] + s.one_minus_beta2 * gradient * gradient;
    p[i] = decayed - s.step_size * m_i / (std::sqrt(v_i) / s.bias2_sqrt + s.eps);
    m[i] = m_i;
    v[i] = v_i;
  }
}

// torch.optim.SGD (1.13) on elements [begin, end): g = g*gradient_scale + wd*p; with momentum (buffer != nullptr)
// buf = g on the first step, else momentum*buf + (1-dampening)*g, then g = g + momentum*buf (Nesterov) or buf;
// p -= lr*g.
inline void SgdUpdate(const SgdOptions o, const bool first_step, const float gradient_scale, float* __restrict p,
                      const float* __restrict g, float* __restrict buffer, int64_t begin, int64_t end) {
  const float lr = o.lr, weight_decay = o.weight_decay, momentum = o.momentum;
  const float keep = 1.0f - o.dampening;
  if (buffer == nullptr) {
    for (int64_t i = begin; i < end; ++i) p[i] = p[i] - lr * (g[i] * gradient_scale + weight_decay * p[i]);
    return;
  }
  const bool nesterov = o.nesterov;
  for (int64_t i = begin; i < end; ++i) {
    float d = g[i] * gradient_scale + weight_decay * p[i];
    const float b = first_step ? d : momentum * buffer[i] + keep * d;
    d = nesterov ? d + momentum * b : b;
    p[i] = p[i] - lr * d;
    buffer[i] = b;
  }
}

// One parameter to update: its data (written in place), its gradient, and its named optimizer state tensors
// (created zero-filled on the first step).
struct ParameterUpdate {
  Tensor* data;
  const Tensor* gradient;
  std::map<std::string, Tensor>* state;
};

// True when every gradient element is finite; a step must be skipped otherwise (nothing changes).
bool AllFinite(const std::vector<ParameterUpdate>& updates);

// `step` is the step number being taken, starting at 1 (AdamW's bias correction uses it).
absl::Status AdamWStep(const AdamWOptions& options, int64_t step, std::vector<ParameterUpdate>& updates);
absl::Status SgdStep(const SgdOptions& options, int64_t step, std::vector<ParameterUpdate>& updates);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_TRAINING_OPTIMIZER_H_
