// Attributes shared by the sliding-window ops (Conv, ConvTranspose, MaxPool, AveragePool):
// auto_pad, kernel_shape, strides, dilations, pads; parsed and validated once per node, then
// resolved against each input's spatial dims into a WindowGeometry.
#ifndef TRAIND_ENGINE_OPS_SPATIAL_ATTRIBUTES_H_
#define TRAIND_ENGINE_OPS_SPATIAL_ATTRIBUTES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

enum class AutoPad { kNotSet, kValid, kSameUpper, kSameLower };

struct SpatialAttributes {
  AutoPad auto_pad = AutoPad::kNotSet;
  // Each is empty when the attribute is absent (defaults depend on the spatial rank: kernel from
  // the weights, strides and dilations 1, pads 0). Non-empty lists are validated: kernel, strides
  // and dilations positive, pads non-negative, lengths consistent (pads = 2 x the others).
  std::vector<int64_t> kernel_shape;
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  std::vector<int64_t> pads;  // [x1_begin, x2_begin, ..., x1_end, x2_end, ...]

  // `allow_dilations`: false for ops without the attribute (AveragePool before opset 19).
  static absl::StatusOr<SpatialAttributes> Parse(const KernelInit& init, bool allow_dilations);
};

// Everything a sliding window needs for one input shape, one entry per spatial dim.
struct WindowGeometry {
  std::vector<int64_t> input;
  std::vector<int64_t> output;
  std::vector<int64_t> kernel;
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  std::vector<int64_t> pad_begin;
  std::vector<int64_t> pad_end;  // As given or derived from auto_pad (not including ceil_mode).

  size_t rank() const { return input.size(); }
  // Dilated kernel extent: (k - 1) * d + 1.
  int64_t Extent(size_t i) const { return (kernel[i] - 1) * dilations[i] + 1; }
  // End padding a window needs so that every output window lies within the padded input; differs
  // from pad_end only under ceil_mode, where the last window may hang over the end.
  int64_t ReachPadEnd(size_t i) const { return (output[i] - 1) * strides[i] + Extent(i) - input[i] - pad_begin[i]; }
};

// Resolves a forward window (Conv, pooling) for `input` spatial dims. `kernel` is the kernel shape
// to use (from the attribute or the weights; the caller checks they agree). ceil_mode rounds the
// output size up (pooling), dropping a last window that would start inside the end padding.
// Errors: rank mismatches, or a kernel larger than the padded input.
absl::StatusOr<WindowGeometry> ResolveForwardWindow(const SpatialAttributes& attributes,
                                                    absl::Span<const int64_t> input, absl::Span<const int64_t> kernel,
                                                    bool ceil_mode);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_SPATIAL_ATTRIBUTES_H_
