// Shapes are plain int64 vectors (ONNX dims). Helpers here never overflow: every product of dims
// goes through CheckedMul, and every axis through NormalizeAxis.
#ifndef TRAIND_ENGINE_CORE_SHAPE_H_
#define TRAIND_ENGINE_CORE_SHAPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace traind::engine {

using Shape = std::vector<int64_t>;

// Largest element count any tensor may have (2^40): keeps byte sizes far from int64 overflow even for
// 8-byte elements, and far beyond what a 24 GiB machine can hold anyway.
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 40;

// a * b for non-negative operands; false if the product exceeds INT64_MAX.
bool CheckedMul(int64_t a, int64_t b, int64_t* product);

// Product of dims. Errors: a negative dim (kInvalidArgument) or a product above `limit` (kResourceExhausted
// naming the limit).
absl::StatusOr<int64_t> ElementCount(absl::Span<const int64_t> dims,
                                     int64_t limit = kMaxTensorElements);

// Product of dims[begin, end) for a shape already validated by ElementCount (cannot overflow then).
int64_t DimProduct(absl::Span<const int64_t> dims, size_t begin, size_t end);

// Maps axis in [-rank, rank) to [0, rank); kInvalidArgument otherwise.
absl::StatusOr<int64_t> NormalizeAxis(int64_t axis, int64_t rank);

// "[2,3,4]".
std::string ShapeToString(absl::Span<const int64_t> dims);

// Channels-last ("NHWC") layout of an [N, C, spatial...] tensor is [N, spatial..., C]: the same tensor with its
// channel axis moved last in memory. These map a shape between the two orders (rank >= 2; others unchanged).
Shape ChannelsLastShape(absl::Span<const int64_t> channels_first);
Shape ChannelsFirstShape(absl::Span<const int64_t> channels_last);

// Numpy multidirectional broadcasting of any number of shapes; kInvalidArgument names both dims
// when two are incompatible.
absl::StatusOr<Shape> BroadcastShapes(absl::Span<const Shape* const> shapes);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_CORE_SHAPE_H_
