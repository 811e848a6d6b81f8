// The contract of Concat, one place for both devices (layout_ops.cc on the CPU, layout_ops_gpu.cc on the GPU).
// Transpose's GPU kernel runs the CPU kernel itself for its index map (gpu_util.h), so it has no second contract.
#ifndef TRAIND_ENGINE_OPS_LAYOUT_OPS_H_
#define TRAIND_ENGINE_OPS_LAYOUT_OPS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/core/shape.h"
#include "engine/core/tensor.h"

namespace traind::engine {

// Concat along `axis` (negative: from the end): at least one input, all of one dtype and rank and of equal dims
// except along the axis. The output's shape and the normalized axis.
struct ConcatShape {
  Shape output;
  int64_t axis = 0;
};
absl::StatusOr<ConcatShape> CheckConcatInputs(absl::Span<const Tensor* const> inputs, int64_t axis);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_LAYOUT_OPS_H_
