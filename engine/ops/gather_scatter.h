// The contract of Gather and ScatterND, one place for both devices (gather_scatter.cc on the CPU,
// gather_scatter_gpu.cc on the GPU): attributes, input checks (every index in range before any element moves) and
// the geometry the kernels work on.
#ifndef TRAIND_ENGINE_OPS_GATHER_SCATTER_H_
#define TRAIND_ENGINE_OPS_GATHER_SCATTER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/shape.h"
#include "engine/core/tensor.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

// Gather(data, indices) along `axis`: int32 or int64 indices, each in [-dim, dim) of that axis (negative ones count
// from the end). The output is data's dims before the axis, the indices' shape, data's dims after it: rows of
// `inner` elements, `count` per outer index.
struct GatherShape {
  int64_t axis = 0, axis_dim = 0;
  int64_t outer = 1, inner = 1, count = 0;
  Shape output;
};
absl::StatusOr<GatherShape> CheckGatherInputs(const Tensor& data, const Tensor& indices, int64_t axis);

// The `reduction` of ScatterND and ScatterElements: none, add, mul (opset 18's max and min are kUnimplemented).
enum class ScatterReduction { kNone = 0, kAdd = 1, kMul = 2 };
absl::StatusOr<ScatterReduction> ParseScatterReduction(const KernelInit& init);

// ScatterND(data, indices, updates): indices [..., k] address slices data[i_1..i_k, :] (1 <= k <= rank), updates
// of shape indices.shape[:-1] + data.shape[k:] and data's dtype. Every addressed slice's offset in data (indices
// range-checked, negative ones from the end), in index order, and the elements per slice.
struct ScatterNdSlices {
  std::vector<int64_t> offsets;
  int64_t slice_size = 1;
};
absl::StatusOr<ScatterNdSlices> CheckScatterNdInputs(const Tensor& data, const Tensor& indices, const Tensor& updates);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_GATHER_SCATTER_H_
