// The contract of BatchNormalization and LayerNormalization, one place for both devices (norm_ops.cc on the CPU,
// norm_ops_gpu.cc on the GPU): attributes, what the inputs must be and the shapes the kernels work on.
#ifndef TRAIND_ENGINE_OPS_NORM_OPS_H_
#define TRAIND_ENGINE_OPS_NORM_OPS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/core/shape.h"
#include "engine/core/tensor.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

// Attribute `epsilon` of the normalizations and their gradients (default 1e-5): finite and >= 0.
absl::StatusOr<float> ParseNormEpsilon(const KernelInit& init);

struct BatchNormAttributes {
  float epsilon = 1e-5f;
  float momentum = 0.9f;
  bool training = false;  // training_mode (opset 14+): batch statistics, running statistics as outputs 1 and 2
  bool spatial = true;    // false (opsets 6-8): statistics per (channel, spatial position)
};
// Training mode before opset 14 is kUnimplemented.
absl::StatusOr<BatchNormAttributes> ParseBatchNormAttributes(const KernelInit& init);

// X [N, C, ...]; scale, B, input_mean and input_var with one element per feature, in X's dtype; training mode on a
// non-empty batch. X is rows of `row` elements, row r of feature r % features.
struct BatchNormShape {
  int64_t batch = 0, features = 0, row = 0;
};
absl::StatusOr<BatchNormShape> CheckBatchNormInputs(const Tensor& x, const Tensor* const parameters[4],
                                                    const BatchNormAttributes& attributes);

struct LayerNormAttributes {
  int64_t axis = -1;
  float epsilon = 1e-5f;
};
// stash_type other than 1 (float) is kUnimplemented.
absl::StatusOr<LayerNormAttributes> ParseLayerNormAttributes(const KernelInit& init);

// Scale and B (optional) in X's dtype, broadcasting to X.shape[axis:] as one element or that whole shape (other
// broadcasts are kUnimplemented).
struct LayerNormShape {
  int64_t rows = 0, row = 0;  // groups normalised, elements per group
  bool scale_is_scalar = false, bias_is_scalar = false;
  Shape statistics;  // Mean and InvStdDev: X's shape with 1 for the normalized dims
};
absl::StatusOr<LayerNormShape> CheckLayerNormInputs(const Tensor& x, const Tensor& scale, const Tensor* bias,
                                                    int64_t axis);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_NORM_OPS_H_
