#include "engine/core/shape.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace traind::engine {

bool CheckedMul(int64_t a, int64_t b, int64_t* product) {
  return !__builtin_mul_overflow(a, b, product);
}

absl::StatusOr<int64_t> ElementCount(absl::Span<const int64_t> dims, int64_t limit) {
  int64_t count = 1;
  for (int64_t dim : dims) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension in shape ", ShapeToString(dims)));
    }
  }
  // A zero dim anywhere makes the product 0, however large the others are.
  if (std::find(dims.begin(), dims.end(), 0) != dims.end()) return 0;
  for (int64_t dim : dims) {
    if (!CheckedMul(count, dim, &count) || count > limit) {
      // A size limit, not a malformed shape: callers validating a model's declared dims report it as invalid.
      return absl::ResourceExhaustedError(absl::StrCat("shape ", ShapeToString(dims),
                                                       " has more than ", limit, " elements"));
    }
  }
  return count;
}

int64_t DimProduct(absl::Span<const int64_t> dims, size_t begin, size_t end) {
  int64_t product = 1;
  for (size_t i = begin; i < end && i < dims.size(); ++i) product *= dims[i];
  return product;
}

absl::StatusOr<int64_t> NormalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("axis ", axis, " is out of range for rank ", rank));
  }
  return axis < 0 ? axis + rank : axis;
}

std::string ShapeToString(absl::Span<const int64_t> dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
}

absl::StatusOr<Shape> BroadcastShapes(absl::Span<const Shape* const> shapes) {
  size_t rank = 0;
  for (const Shape* shape : shapes) rank = std::max(rank, shape->size());
  Shape result(rank, 1);
  for (const Shape* shape : shapes) {
    const size_t offset = rank - shape->size();
    for (size_t i = 0; i < shape->size(); ++i) {
      const int64_t dim = (*shape)[i];
      int64_t& out = result[offset + i];
      if (dim == out || dim == 1) continue;
      if (out == 1) {
        out = dim;
        continue;
      }
      return absl::InvalidArgumentError(absl::StrCat("shapes are not broadcastable: dim ", dim,
                                                     " vs ", out, " in ", ShapeToString(*shape)));
    }
  }
  return result;
}

Shape ChannelsLastShape(absl::Span<const int64_t> channels_first) {
  Shape shape(channels_first.begin(), channels_first.end());
  if (shape.size() >= 2) std::rotate(shape.begin() + 1, shape.begin() + 2, shape.end());
  return shape;
}

Shape ChannelsFirstShape(absl::Span<const int64_t> channels_last) {
  Shape shape(channels_last.begin(), channels_last.end());
  if (shape.size() >= 2) std::rotate(shape.begin() + 1, shape.end() - 1, shape.end());
  return shape;
}

}  // namespace traind::engine
