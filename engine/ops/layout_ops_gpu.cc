// GPU kernels of Transpose (by index map, gpu_util.h) and Concat (row blocks, data_movement.cl), float32.
#include "absl/strings/str_cat.h"
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {
namespace {

class ConcatGpuKernel final : public GpuKernel {
 public:
  ConcatGpuKernel(int64_t axis, ClKernel copy_rows) : axis_(axis), copy_rows_(std::move(copy_rows)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* first, context.RequiredInput(0));
    const int64_t rank = first->rank();
    TRAIND_ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(axis_, rank));
    Shape out_shape = first->shape();
    out_shape[axis] = 0;
    for (int i = 0; i < context.num_inputs(); ++i) {
      TRAIND_ASSIGN_OR_RETURN(const Tensor* input, context.RequiredInput(i));
      if (input->dtype() != first->dtype() || input->rank() != rank) {
        return absl::InvalidArgumentError("Concat: inputs differ in dtype or rank");
      }
      for (int64_t d = 0; d < rank; ++d) {
        if (d != axis && input->dim(d) != first->dim(d)) {
          return absl::InvalidArgumentError(
              absl::StrCat("Concat: ", input->DebugString(), " does not match ", first->DebugString()));
        }
      }
      out_shape[axis] += input->dim(axis);
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, first->dtype(), out_shape));
    if (y->num_elements() == 0) return absl::OkStatus();
    const int64_t outer = DimProduct(out_shape, 0, static_cast<size_t>(axis));
    const int64_t output_row = y->num_elements() / outer;
    int64_t offset = 0;
    for (int i = 0; i < context.num_inputs(); ++i) {
      const Tensor& input = *context.input(i);
      const int64_t n = input.num_elements();
      const int64_t input_row = n / outer;
      if (n > 0) {
        TRAIND_RETURN_IF_ERROR(copy_rows_.Launch1D(context, n, context.mem(input), context.mem(*y), n, input_row,
                                                   output_row, offset));
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
