// The 2-D window (1-D windows have height 1) that the GPU pooling and convolution kernels take (TRAIND_WINDOW_ARGS
// in engine/gpu/prelude.cl), from the geometry of the ops' contract (spatial_attributes.h).
#ifndef TRAIND_ENGINE_OPS_GPU_POOL_H_
#define TRAIND_ENGINE_OPS_GPU_POOL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gpu/kernel.h"
#include "engine/ops/spatial_attributes.h"

namespace traind::engine::gpu {

struct PoolWindow {
  Shape output_shape;  // [N, C(or M), out spatial...]
  int64_t height = 1, width = 1, out_height = 1, out_width = 1, kernel_h = 1, kernel_w = 1, stride_h = 1,
          stride_w = 1, dilation_h = 1, dilation_w = 1, pad_h = 0, pad_w = 0, pad_end_h = 0, pad_end_w = 0;

  // Launches `kernel` over `items` with `args...` followed by the window's fourteen arguments.
  template <typename... Args>
  absl::Status Launch(const ClKernel& kernel, const GpuKernelContext& context, int64_t items,
                      const Args&... args) const {
    return kernel.Launch1D(context, items, args..., height, width, out_height, out_width, kernel_h, kernel_w,
                           stride_h, stride_w, dilation_h, dilation_w, pad_h, pad_w, pad_end_h, pad_end_w);
  }
};

// The window the GPU kernels take for a geometry the ops' contract resolved (pool_ops.h, conv_ops.h), with the
// op's output shape: kUnimplemented beyond 2 spatial dims.
absl::StatusOr<PoolWindow> MakePoolWindow(const char* op, const WindowGeometry& geometry, Shape output_shape);

}  // namespace traind::engine::gpu

#endif  // TRAIND_ENGINE_OPS_GPU_POOL_H_
