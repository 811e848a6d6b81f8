// GPU kernel of Pad (opset 11+: pads and constant_value as inputs; every mode): a gather by the index map its CPU
// kernel gives (gpu_util.h), with the constant written where the map points at no input element.
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {

absl::StatusOr<std::unique_ptr<GpuKernel>> CreatePadGpuKernel(const GpuKernelInit& init) {
  if (init.opset() < 11) return init.Unsupported("pads as an attribute (opset < 11)");
  return MakeIndexMapGpuKernel(init, /*fill_input=*/2);
}

}  // namespace traind::engine::gpu
