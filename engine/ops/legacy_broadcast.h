// Broadcasting of the legacy (opset < 7) binary ops Add Sub Mul Div Pow: without attribute
// `broadcast` = 1 both shapes must be equal; with it, B is broadcast onto A, B's dims lining up
// with A's starting at attribute `axis` (default: B's dims are A's trailing dims). The output
// always has A's shape. PyTorch's old exports (opset 6) rely on this.
#ifndef TRAIND_ENGINE_OPS_LEGACY_BROADCAST_H_
#define TRAIND_ENGINE_OPS_LEGACY_BROADCAST_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "engine/core/shape.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

class LegacyBroadcast {
 public:
  // For opset >= 7 (numpy broadcasting) returns an inactive instance; otherwise parses and
  // validates `broadcast` (0/1) and `axis`.
  static absl::StatusOr<LegacyBroadcast> FromNode(const KernelInit& init);

  bool active() const { return active_; }

  // B's shape, padded with 1s to A's rank so that numpy broadcasting of (A, result) yields A's
  // shape and the legacy alignment. Same element count as `b`, so B's buffer is usable as is.
  // kInvalidArgument when B does not fit A under the legacy rules.
  absl::StatusOr<Shape> AlignB(const Shape& a, const Shape& b) const;

 private:
  bool active_ = false;
  bool broadcast_ = false;
  std::optional<int64_t> axis_;
};

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_LEGACY_BROADCAST_H_
