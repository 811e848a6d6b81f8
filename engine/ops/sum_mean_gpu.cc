// GPU kernels of Sum and Mean: binary_ops.cl's addition, pairwise, with numpy broadcasting (opset 8+).
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateSumGpuKernel(const GpuKernelInit& init) {
  if (init.opset() < 8) return init.Unsupported("no broadcasting before opset 8");
  return MakeVariadicGpuKernel(init, "add_f32", /*mean=*/false);
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateMeanGpuKernel(const GpuKernelInit& init) {
  if (init.opset() < 8) return init.Unsupported("no broadcasting before opset 8");
  return MakeVariadicGpuKernel(init, "add_f32", /*mean=*/true);
}

}  // namespace traind::engine::gpu
