// The contract of ConstantOfShape, one place for both devices (constant_ops.cc on the CPU, constant_ops_gpu.cc on the
// GPU).
#ifndef TRAIND_ENGINE_OPS_CONSTANT_OPS_H_
#define TRAIND_ENGINE_OPS_CONSTANT_OPS_H_

#include "absl/status/statusor.h"
#include "engine/core/shape.h"
#include "engine/core/tensor.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

// Attribute `value`: a one-element tensor (default a float32 0).
absl::StatusOr<Tensor> ParseConstantOfShapeValue(const KernelInit& init);

// The input: a 1-D int64 tensor, the output's shape.
absl::StatusOr<Shape> ConstantOfShapeOutputShape(const Tensor& shape);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_CONSTANT_OPS_H_
