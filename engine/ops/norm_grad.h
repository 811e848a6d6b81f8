// The contract of BatchNormalizationGrad and LayerNormalizationGrad (ai.traind.training), one place for both
// devices (norm_grad.cc on the CPU, norm_grad_gpu.cc on the GPU): attributes and what the inputs must be.
#ifndef TRAIND_ENGINE_OPS_NORM_GRAD_H_
#define TRAIND_ENGINE_OPS_NORM_GRAD_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/core/tensor.h"

namespace traind::engine {

// Attribute `epsilon`: ParseNormEpsilon (norm_ops.h).

// BatchNormalizationGrad(dY, X, Scale): X [N, C, ...], dY as X, Scale [C], one dtype, a non-empty batch.
struct BatchNormGradShape {
  int64_t batch = 0, channels = 0;
  int64_t row = 0;  // elements per (image, channel)
};
absl::StatusOr<BatchNormGradShape> CheckBatchNormGradInputs(const Tensor& dy, const Tensor& x, const Tensor& scale);

// LayerNormalizationGrad(dY, X, Scale) over X's axes axis..rank-1: dY as X, Scale with that many elements.
struct LayerNormGradShape {
  int64_t rows = 0;  // groups normalised
  int64_t row = 0;   // elements per group
};
absl::StatusOr<LayerNormGradShape> CheckLayerNormGradInputs(const Tensor& dy, const Tensor& x, const Tensor& scale,
                                                            int64_t axis);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_NORM_GRAD_H_
