// The contract of ReluGrad, ErfGrad and GeluGrad (ai.traind.training), one place for both devices (activation_grad.cc on the
// CPU, activation_grad_gpu.cc on the GPU).
#ifndef TRAIND_ENGINE_OPS_ACTIVATION_GRAD_H_
#define TRAIND_ENGINE_OPS_ACTIVATION_GRAD_H_

#include "absl/status/status.h"
#include "engine/core/tensor.h"

namespace traind::engine {

// `op`(dY, X) -> dX: dY has X's shape and dtype.
absl::Status CheckActivationGradInputs(const char* op, const Tensor& dy, const Tensor& x);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_ACTIVATION_GRAD_H_
