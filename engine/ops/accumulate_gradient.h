// The contract of AccumulateGradient (ai.traind.training), one place for both devices (accumulate_gradient.cc on
// the CPU, accumulate_gradient_gpu.cc on the GPU).
#ifndef TRAIND_ENGINE_OPS_ACCUMULATE_GRADIENT_H_
#define TRAIND_ENGINE_OPS_ACCUMULATE_GRADIENT_H_

#include "absl/status/status.h"
#include "engine/core/tensor.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

// The node has exactly the inputs buffer, gradient, reset.
absl::Status CheckAccumulateGradientNode(const KernelInit& init);

// reset is a bool scalar; the buffer has the gradient's dtype and shape.
absl::Status CheckAccumulateGradientInputs(const Tensor& buffer, const Tensor& gradient, const Tensor& reset);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_ACCUMULATE_GRADIENT_H_
