// Views a tensor as [outer, axis_dim, inner] around one axis: the layout every "along one axis" op
// (Softmax, ArgMax, CumSum, TopK, the losses' class axis) works on. Element (o, a, i) lives at
// offset (o * axis_dim + a) * inner + i, so inner == 1 means the axis is contiguous.
#ifndef TRAIND_ENGINE_OPS_AXIS_SPLIT_H_
#define TRAIND_ENGINE_OPS_AXIS_SPLIT_H_

#include <cstdint>

#include "engine/core/shape.h"

namespace traind::engine {

struct AxisSplit {
  int64_t outer = 1;
  int64_t axis_dim = 1;
  int64_t inner = 1;
};

// `axis` is already normalised to [0, rank); the shape comes from a valid Tensor, so the products
// cannot overflow.
inline AxisSplit SplitAtAxis(const Shape& shape, int64_t axis) {
  const size_t a = static_cast<size_t>(axis);
  return AxisSplit{DimProduct(shape, 0, a), shape[a], DimProduct(shape, a + 1, shape.size())};
}

// Rows per ParallelFor chunk so that each chunk touches about kParallelElementThreshold elements.
inline int64_t RowsPerChunk(int64_t row_elements, int64_t threshold) {
  return row_elements <= 0 ? threshold : (threshold + row_elements - 1) / row_elements;
}

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_AXIS_SPLIT_H_
