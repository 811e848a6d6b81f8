// The contract of Conv and ConvGrad (ai.traind.training), one place for both devices (conv_ops.cc and
// conv_grad.cc on the CPU, conv_ops_gpu.cc and conv_grad_gpu.cc on the GPU): attributes, what the inputs must be,
// the window and the output's shape.
#ifndef TRAIND_ENGINE_OPS_CONV_OPS_H_
#define TRAIND_ENGINE_OPS_CONV_OPS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/core/shape.h"
#include "engine/core/tensor.h"
#include "engine/ops/spatial_attributes.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

// Attribute `group` (default 1): >= 1.
absl::StatusOr<int64_t> ParseConvGroup(const KernelInit& init);

struct ConvShape {
  int64_t channels = 0, out_channels = 0;  // C, M
  WindowGeometry window;                   // over X's spatial dims, W's kernel
  Shape output;                            // [N, M, out spatial...]
};

// Conv(X, W, B): X [N, C, spatial...], W [M, C / group, kernel...] of X's rank and dtype with M divisible by group,
// the kernel_shape attribute (when given) W's kernel, B (optional) [M] of X's dtype.
absl::StatusOr<ConvShape> CheckConvInputs(const Tensor& x, const Tensor& w, const Tensor* b,
                                          const SpatialAttributes& attributes, int64_t group);

// ConvGrad(dY, X, W): X and W as Conv's, dY of Conv's output shape and X's dtype.
absl::StatusOr<ConvShape> CheckConvGradInputs(const Tensor& dy, const Tensor& x, const Tensor& w,
                                              const SpatialAttributes& attributes, int64_t group);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_CONV_OPS_H_
