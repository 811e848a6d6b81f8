// The contract of Softmax, LogSoftmax, Hardmax and SoftmaxGrad, one place for both devices (softmax_ops.cc on the CPU,
// softmax_ops_gpu.cc on the GPU): which elements one normalisation covers.
#ifndef TRAIND_ENGINE_OPS_SOFTMAX_OPS_H_
#define TRAIND_ENGINE_OPS_SOFTMAX_OPS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/core/tensor.h"
#include "engine/ops/axis_split.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

// From opset 13 along `axis` (default -1); before, over the input coerced to 2-D at `axis` (default 1): rows are
// dims [0, axis), a row all later dims.
struct SoftmaxAttributes {
  int64_t axis = -1;
  bool coerce_to_2d = false;
};
absl::StatusOr<SoftmaxAttributes> ParseSoftmaxAttributes(const KernelInit& init);
// SoftmaxGrad's (ai.traind.training): `axis` (default -1) and `coerce_to_2d` (0 or 1) as attributes, since its opset
// says nothing of the forward Softmax's.
absl::StatusOr<SoftmaxAttributes> ParseSoftmaxGradAttributes(const KernelInit& init);

// X as [outer, axis_dim, inner] with the normalised axis in the middle (coerced: inner 1). A scalar before opset 13
// is one element; from 13 its axis is out of range.
absl::StatusOr<AxisSplit> SoftmaxSplit(const Tensor& x, const SoftmaxAttributes& attributes);

// SoftmaxGrad's inputs: dY of Y's shape and dtype (InvalidArgument otherwise), split as SoftmaxSplit splits Y.
absl::StatusOr<AxisSplit> CheckSoftmaxGradInputs(const Tensor& dy, const Tensor& y,
                                                 const SoftmaxAttributes& attributes);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_SOFTMAX_OPS_H_
