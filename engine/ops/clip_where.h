// The contract of Where and Clip, one place for both devices (clip_where.cc on the CPU, clip_where_gpu.cc on the
// GPU).
#ifndef TRAIND_ENGINE_OPS_CLIP_WHERE_H_
#define TRAIND_ENGINE_OPS_CLIP_WHERE_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/shape.h"
#include "engine/core/tensor.h"

namespace traind::engine {

// Where(condition, X, Y): a bool condition, X and Y of one dtype; the output shape is the three's broadcast.
absl::StatusOr<Shape> CheckWhereInputs(const Tensor& condition, const Tensor& x, const Tensor& y);

// Clip's min or max input (opset 11+): omitted (nullptr), or a one-element tensor of X's dtype.
absl::Status CheckClipBound(const Tensor* bound, const Tensor& x);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_CLIP_WHERE_H_
