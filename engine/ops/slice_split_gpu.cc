// GPU kernel of Slice (opset 10+, starts/ends/axes/steps as host inputs): a gather by the index map its CPU kernel
// gives (gpu_util.h), so negative steps, clamping and omitted axes are the CPU kernel's.
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateSliceGpuKernel(const GpuKernelInit& init) {
  if (init.opset() < 10) return init.Unsupported("starts/ends as attributes (opset < 10)");
  return MakeIndexMapGpuKernel(init);
}

}  // namespace traind::engine::gpu
