// GPU kernels of Expand and Tile: gathers by the index maps their CPU kernels give (gpu_util.h).
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateExpandGpuKernel(const GpuKernelInit& init) {
  return MakeIndexMapGpuKernel(init);
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateTileGpuKernel(const GpuKernelInit& init) {
  return MakeIndexMapGpuKernel(init);
}

}  // namespace traind::engine::gpu
