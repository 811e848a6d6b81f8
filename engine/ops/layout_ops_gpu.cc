// GPU kernels of Transpose (by index map, gpu_util.h) and Concat (row blocks, data_movement.cl), float32; Concat's
// contract is layout_ops.h's.
#include "engine/ops/gpu_util.h"
#include "engine/ops/layout_ops.h"

namespace traind::engine::gpu {
namespace {

class ConcatGpuKernel final : public GpuKernel {
 public:
  ConcatGpuKernel(int64_t axis, ClKernel copy_rows) : axis_(axis), copy_rows_(std::move(copy_rows)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    const absl::Span<const Tensor* const> inputs = context.inputs();
    TRAIND_ASSIGN_OR_RETURN(const ConcatShape shape, CheckConcatInputs(inputs, axis_));
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, inputs[0]->dtype(), shape.output));
    if (y->num_elements() == 0) return absl::OkStatus();
    const int64_t outer = DimProduct(shape.output, 0, static_cast<size_t>(shape.axis));
    const int64_t output_row = y->num_elements() / outer;
    int64_t offset = 0;
    for (const Tensor* input : inputs) {
      const int64_t n = input->num_elements();
      const int64_t input_row = n / outer;
      if (n > 0) {
        TRAIND_RETURN_IF_ERROR(
            copy_rows_.Launch1D(context, n, context.mem(*input), context.mem(*y), n, input_row, output_row, offset));
      }
      offset += input_row;
    }
    return absl::OkStatus();
  }

 private:
  int64_t axis_;
  ClKernel copy_rows_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateTransposeGpuKernel(const GpuKernelInit& init) {
  return MakeIndexMapGpuKernel(init);
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateConcatGpuKernel(const GpuKernelInit& init) {
  for (int i = 0; i < init.num_inputs(); ++i) TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {i}));
  TRAIND_ASSIGN_OR_RETURN(const int64_t axis, init.GetInt("axis", std::nullopt));
  TRAIND_ASSIGN_OR_RETURN(ClKernel copy_rows, init.Kernel("data_movement.cl", "copy_rows"));
  return MakeGpuKernel<ConcatGpuKernel>(axis, std::move(copy_rows));
}

}  // namespace traind::engine::gpu
