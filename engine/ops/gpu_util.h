// Helpers shared by the GPU kernels of engine/ops (<op>_gpu.cc): broadcasting layouts for prelude.cl's
// broadcast_offset, dtype checks in factories, and the kernel shapes most ops share.
#ifndef TRAIND_ENGINE_OPS_GPU_UTIL_H_
#define TRAIND_ENGINE_OPS_GPU_UTIL_H_

#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/shape.h"
#include "engine/core/status_macros.h"
#include "engine/core/tensor.h"
#include "engine/gpu/kernel.h"

namespace traind::engine::gpu {

// Output dims and each input's element strides, innermost first, as broadcast_offset (prelude.cl) takes them.
// Adjacent dims that every input treats alike (all broadcast, or all present) are merged first, so only tensors of
// more than 8 irreducible dims are refused (kUnimplemented).
struct BroadcastLayout {
  cl_long8 dims;
  std::vector<cl_long8> strides;  // per input
};
absl::StatusOr<BroadcastLayout> MakeBroadcastLayout(const Shape& output, const std::vector<Shape>& inputs);

// kUnimplemented (the node stays on the CPU) unless every listed input that the node has is float32.
absl::Status RequireFloat32(const GpuKernelInit& init, std::initializer_list<int> inputs);

template <typename K, typename... Args>
absl::StatusOr<std::unique_ptr<GpuKernel>> MakeGpuKernel(Args&&... args) {
  return std::unique_ptr<GpuKernel>(new K(std::forward<Args>(args)...));
}

// a (op) b into `output`, whose shape is their broadcast; `output` may be `a` itself. `same` and `broadcast` are the
// op's two kernels of binary_ops.cl.
absl::Status LaunchBinary(GpuKernelContext& context, const ClKernel& same, const ClKernel& broadcast, const Tensor& a,
                          const Tensor& b, const Tensor& output);
// Min, Max, Sum, Mean of any number of float32 inputs with broadcasting: `kernel_name` of binary_ops.cl pairwise,
// then (mean) a division by the count. One input is forwarded, as on the CPU.
absl::StatusOr<std::unique_ptr<GpuKernel>> MakeVariadicGpuKernel(const GpuKernelInit& init, const char* kernel_name,
                                                                 bool mean);

// The GPU kernel of an op that only moves the elements of its first input (Transpose, Slice, Expand, Tile, Pad):
// once per input shape (and values of the host inputs: starts, pads, repeats...), the op's own CPU kernel runs on the
// host over the input's element indices, so its output says where each output element comes from; the device then
// gathers by that map (data_movement.cl). Every mode and corner case of the op is its CPU kernel's, written once.
// `fill_input` >= 0 names a host input holding a scalar for elements that come from no input element (Pad's
// constant_value: the CPU kernel is given -1 there, the device writes the scalar).
absl::StatusOr<std::unique_ptr<GpuKernel>> MakeIndexMapGpuKernel(const GpuKernelInit& init, int fill_input = -1);

// The GPU kernel of an op whose CPU kernel only re-labels its first input (Reshape, Flatten, Squeeze, Unsqueeze,
// Identity): it runs that CPU kernel on the device tensor, which it forwards with a new shape without reading its
// bytes; the other inputs (shapes, axes) are read on the host. One shape rule, no copy.
absl::StatusOr<std::unique_ptr<GpuKernel>> MakeAliasingGpuKernel(const GpuKernelInit& init);

}  // namespace traind::engine::gpu

#endif  // TRAIND_ENGINE_OPS_GPU_UTIL_H_
