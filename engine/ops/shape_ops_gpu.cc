// Identity, Reshape, Flatten, Squeeze and Unsqueeze on the device: their CPU kernels run on the device tensor and
// forward its buffer with a new shape (MakeAliasingGpuKernel), so no byte moves and no shape rule is written twice.
// Shape and Size stay on the CPU, where they read only a device tensor's shape (nothing is downloaded).
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateIdentityGpuKernel(const GpuKernelInit& init) {
  return MakeAliasingGpuKernel(init);
}
absl::StatusOr<std::unique_ptr<GpuKernel>> CreateReshapeGpuKernel(const GpuKernelInit& init) {
  return MakeAliasingGpuKernel(init);
}
absl::StatusOr<std::unique_ptr<GpuKernel>> CreateFlattenGpuKernel(const GpuKernelInit& init) {
  return MakeAliasingGpuKernel(init);
}
absl::StatusOr<std::unique_ptr<GpuKernel>> CreateSqueezeGpuKernel(const GpuKernelInit& init) {
  return MakeAliasingGpuKernel(init);
}
absl::StatusOr<std::unique_ptr<GpuKernel>> CreateUnsqueezeGpuKernel(const GpuKernelInit& init) {
  return MakeAliasingGpuKernel(init);
}

}  // namespace traind::engine::gpu
