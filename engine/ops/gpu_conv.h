// What the GPU Conv and ConvGrad kernels share: the convolution geometry of one (X, W) pair and how many images
// go through im2col at a time.
#ifndef TRAIND_ENGINE_OPS_GPU_CONV_H_
#define TRAIND_ENGINE_OPS_GPU_CONV_H_

#include <algorithm>

#include "engine/ops/conv_ops.h"
#include "engine/ops/gpu_pool.h"
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {

struct ConvGeometry {
  PoolWindow window;  // output_shape [N, M, out spatial...]
  int64_t images = 0, channels = 0, out_channels = 0, group = 1;
  int64_t group_channels = 0, group_out_channels = 0;
  int64_t taps = 0;       // kernel_h * kernel_w
  int64_t positions = 0;  // out_height * out_width
  int64_t rows = 0;       // channels * taps: im2col rows per image
  int64_t chunk = 1;      // images per im2col pass
  bool pointwise = false;  // 1x1, stride 1, no padding: X itself is the im2col matrix

  int64_t group_rows() const { return group_channels * taps; }
};

// The geometry of a convolution of `images` images as the ops' contract resolved it (conv_ops.h's CheckConvInputs
// or CheckConvGradInputs): kUnimplemented beyond 2 spatial dims.
inline absl::StatusOr<ConvGeometry> MakeConvGeometry(const char* op, ConvShape shape, int64_t images, int64_t group) {
  ConvGeometry g;
  TRAIND_ASSIGN_OR_RETURN(g.window, MakePoolWindow(op, shape.window, std::move(shape.output)));
  g.images = images;
  g.channels = shape.channels;
  g.out_channels = shape.out_channels;
  g.group = group;
  g.group_channels = g.channels / group;
  g.group_out_channels = g.out_channels / group;
  g.taps = g.window.kernel_h * g.window.kernel_w;
  g.positions = g.window.out_height * g.window.out_width;
  g.rows = g.channels * g.taps;
  g.pointwise = g.taps == 1 && g.window.stride_h == 1 && g.window.stride_w == 1 && g.window.pad_h == 0 &&
                g.window.pad_w == 0 && g.window.pad_end_h == 0 && g.window.pad_end_w == 0;
  // im2col of at most ~64 MiB at a time.
  constexpr int64_t kColumnBytes = int64_t{64} << 20;
  const int64_t per_image = std::max<int64_t>(1, g.rows * g.positions * static_cast<int64_t>(sizeof(float)));
  g.chunk = std::clamp<int64_t>(kColumnBytes / per_image, 1, std::max<int64_t>(1, g.images));
  return g;
}

}  // namespace traind::engine::gpu

#endif  // TRAIND_ENGINE_OPS_GPU_CONV_H_
