#include "engine/ops/legacy_broadcast.h"

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace traind::engine {

absl::StatusOr<LegacyBroadcast> LegacyBroadcast::FromNode(const KernelInit& init) {
  LegacyBroadcast legacy;
  if (init.opset() >= 7) return legacy;
  legacy.active_ = true;
  TRAIND_ASSIGN_OR_RETURN(const int64_t broadcast, init.GetInt("broadcast", 0));
  if (broadcast != 0 && broadcast != 1) return init.Error("attribute 'broadcast' must be 0 or 1");
  legacy.broadcast_ = broadcast == 1;
  if (init.HasAttribute("axis")) {
    TRAIND_ASSIGN_OR_RETURN(legacy.axis_, init.GetInt("axis", std::nullopt));
  }
  return legacy;
}

absl::StatusOr<Shape> LegacyBroadcast::AlignB(const Shape& a, const Shape& b) const {
  if (!broadcast_) {
    if (a != b) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shapes ", ShapeToString(a), " and ", ShapeToString(b),
          " differ and attribute 'broadcast' is not 1 (opset < 7 does not broadcast by default)"));
    }
    return b;
  }
  const int64_t a_rank = static_cast<int64_t>(a.size());
  const int64_t b_rank = static_cast<int64_t>(b.size());
  // A one-element B of any rank (the spec's "shape(B) = (1, 1)") is a scalar.
  if (b_rank > a_rank && DimProduct(b, 0, b.size()) == 1) return Shape(a_rank, 1);
  int64_t axis = a_rank - b_rank;
  if (axis_) {
    axis = *axis_ < 0 ? *axis_ + a_rank : *axis_;
  }
  if (b_rank > a_rank || axis < 0 || axis > a_rank - b_rank) {
    return absl::InvalidArgumentError(absl::StrCat("B ", ShapeToString(b),
                                                   " cannot be broadcast onto A ",
                                                   ShapeToString(a), " at axis ", axis));
  }
  Shape aligned(a_rank, 1);
  for (int64_t i = 0; i < b_rank; ++i) {
    if (b[i] != a[axis + i] && b[i] != 1) {
      return absl::InvalidArgumentError(absl::StrCat("B ", ShapeToString(b), " does not match A ",
                                                     ShapeToString(a), " at axis ", axis));
    }
    aligned[axis + i] = b[i];
  }
  return aligned;
}

}  // namespace traind::engine
