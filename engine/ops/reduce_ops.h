// The contract of the reductions over axes (ReduceSum, ReduceMean, ReduceSumSquare, ReduceL1, ReduceL2, ReduceMax,
// ReduceMin, ReduceProd, ReduceLogSum, ReduceLogSumExp), one place for both devices (reduce_ops.cc on the CPU,
// reduce_ops_gpu.cc on the GPU): attributes, the axes reduced and the output's shape.
#ifndef TRAIND_ENGINE_OPS_REDUCE_OPS_H_
#define TRAIND_ENGINE_OPS_REDUCE_OPS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/shape.h"
#include "engine/core/tensor.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

struct ReduceAttributes {
  std::vector<int64_t> axes;     // from the attribute; unused when axes_from_input
  bool axes_from_input = false;  // ReduceSum from opset 13: optional input 1
  bool keepdims = true;
  bool noop_with_empty_axes = false;
};
absl::StatusOr<ReduceAttributes> ParseReduceAttributes(const KernelInit& init, bool axes_input_since_13);

// The dims `op` reduces X over: one flag per dim, each axis named once (no axes: every dim). nullopt when no axes
// are given and noop_with_empty_axes is set: the output is X itself. `axes_input`: input 1 where the axes are an
// input (a 1-D int64 tensor), else null.
absl::StatusOr<std::optional<std::vector<bool>>> ReducedDims(const char* op, const Tensor& x, const Tensor* axes_input,
                                                             const ReduceAttributes& attributes);

// X's shape without the reduced dims (keepdims: with 1 in their place).
Shape ReducedShape(const Shape& shape, const std::vector<bool>& reduced, bool keepdims);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_REDUCE_OPS_H_
