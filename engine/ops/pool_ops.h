// The contract of MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool and MaxPoolGrad (ai.traind.training), one
// place for both devices (pool_ops.cc and pool_grad.cc on the CPU, pool_ops_gpu.cc and pool_grad_gpu.cc on the GPU):
// attributes, what the input must be, the window and the output's shape.
#ifndef TRAIND_ENGINE_OPS_POOL_OPS_H_
#define TRAIND_ENGINE_OPS_POOL_OPS_H_

#include "absl/status/statusor.h"
#include "engine/core/shape.h"
#include "engine/core/tensor.h"
#include "engine/ops/spatial_attributes.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

struct PoolAttributes {
  SpatialAttributes spatial;  // kernel_shape (required), strides, pads, auto_pad; dilations for MaxPool
  bool ceil_mode = false;
  bool count_include_pad = false;     // AveragePool
  bool column_major_indices = false;  // MaxPool's storage_order 1
};
// MaxPool's (`max`; MaxPoolGrad takes them too) or AveragePool's attributes.
absl::StatusOr<PoolAttributes> ParsePoolAttributes(const KernelInit& init, bool max);

// `op`(X) over a window: X [N, C, spatial...] with kernel_shape's number of spatial dims. The window and the output
// shape [N, C, out spatial...].
struct PoolShape {
  WindowGeometry window;
  Shape output;
};
absl::StatusOr<PoolShape> CheckPoolInputs(const char* op, const Tensor& x, const PoolAttributes& attributes);

// MaxPoolGrad(dY, X): X as MaxPool's, dY of MaxPool's output shape and X's dtype.
absl::StatusOr<PoolShape> CheckMaxPoolGradInputs(const Tensor& dy, const Tensor& x, const PoolAttributes& attributes);

// Global pooling (`op`) of X [N, C, spatial...]: the output shape [N, C, 1, ...].
absl::StatusOr<Shape> CheckGlobalPoolInput(const char* op, const Tensor& x);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_POOL_OPS_H_
