// GPU kernels of BatchNormalizationGrad and LayerNormalizationGrad (norm_grad.cl), float32; their contract is
// norm_grad.h's.
#include "engine/ops/gpu_util.h"
#include "engine/ops/norm_grad.h"
#include "engine/ops/norm_ops.h"

namespace traind::engine::gpu {
namespace {

class BatchNormGradGpuKernel final : public GpuKernel {
 public:
  BatchNormGradGpuKernel(float epsilon, ClKernel kernel) : epsilon_(epsilon), kernel_(std::move(kernel)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* dy, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* scale, context.RequiredInput(2));
    TRAIND_ASSIGN_OR_RETURN(const BatchNormGradShape shape, CheckBatchNormGradInputs(*dy, *x, *scale));
    TRAIND_ASSIGN_OR_RETURN(Tensor * dx, context.AllocateOutput(0, x->dtype(), x->shape()));
    TRAIND_ASSIGN_OR_RETURN(Tensor * dscale, context.AllocateOutput(1, x->dtype(), scale->shape()));
    TRAIND_ASSIGN_OR_RETURN(Tensor * dbias, context.AllocateOutput(2, x->dtype(), scale->shape()));
    const size_t group = context.work_group_size();
    return kernel_.LaunchGroups(context, shape.channels, group, context.mem(*dy), context.mem(*x), context.mem(*scale),
                                context.mem(*dx), context.mem(*dscale), context.mem(*dbias), shape.batch,
                                shape.channels, shape.row, epsilon_, LocalMemory{group * sizeof(float)});
  }

 private:
  float epsilon_;
  ClKernel kernel_;
};

class LayerNormGradGpuKernel final : public GpuKernel {
 public:
  LayerNormGradGpuKernel(int64_t axis, float epsilon, ClKernel rows_kernel, ClKernel parameters_kernel)
      : axis_(axis),
        epsilon_(epsilon),
        rows_kernel_(std::move(rows_kernel)),
        parameters_kernel_(std::move(parameters_kernel)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* dy, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* scale, context.RequiredInput(2));
    TRAIND_ASSIGN_OR_RETURN(const LayerNormGradShape shape, CheckLayerNormGradInputs(*dy, *x, *scale, axis_));
    const int64_t rows = shape.rows, row = shape.row;
    TRAIND_ASSIGN_OR_RETURN(Tensor * dx, context.AllocateOutput(0, x->dtype(), x->shape()));
    TRAIND_ASSIGN_OR_RETURN(Tensor * dscale, context.AllocateOutput(1, x->dtype(), scale->shape()));
    TRAIND_ASSIGN_OR_RETURN(Tensor * dbias, context.AllocateOutput(2, x->dtype(), scale->shape()));
    if (row == 0 || rows == 0) {
      TRAIND_RETURN_IF_ERROR(context.stream().Fill(context.mem(*dscale), 0.0f, dscale->num_elements()));
      return context.stream().Fill(context.mem(*dbias), 0.0f, dbias->num_elements());
    }
    TRAIND_ASSIGN_OR_RETURN(DeviceMemory stats, context.Scratch(static_cast<size_t>(3 * rows) * sizeof(float)));
    const size_t group = context.work_group_size();
    TRAIND_RETURN_IF_ERROR(rows_kernel_.LaunchGroups(context, rows, group, context.mem(*dy), context.mem(*x),
                                                     context.mem(*scale), context.mem(*dx), stats.mem(), row,
                                                     epsilon_, LocalMemory{group * sizeof(float)}));
    if (!context.wants_output(1) && !context.wants_output(2)) return absl::OkStatus();
    return parameters_kernel_.Launch1D(context, row, context.mem(*dy), context.mem(*x), stats.mem(),
                                       context.mem(*dscale), context.mem(*dbias), rows, row);
  }

 private:
  int64_t axis_;
  float epsilon_;
  ClKernel rows_kernel_;
  ClKernel parameters_kernel_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateBatchNormalizationGradGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1, 2}));
  TRAIND_ASSIGN_OR_RETURN(const float epsilon, ParseNormEpsilon(init));
  TRAIND_ASSIGN_OR_RETURN(const int64_t channels_last, init.GetInt("channels_last", 0));
  if (channels_last != 0) return init.Unsupported("channels-last activations (CPU plans only)");
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("norm_grad.cl", "batch_norm_grad_f32"));
  return MakeGpuKernel<BatchNormGradGpuKernel>(epsilon, std::move(kernel));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateLayerNormalizationGradGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1, 2}));
  TRAIND_ASSIGN_OR_RETURN(const int64_t axis, init.GetInt("axis", -1));
  TRAIND_ASSIGN_OR_RETURN(const float epsilon, ParseNormEpsilon(init));
  TRAIND_ASSIGN_OR_RETURN(ClKernel rows_kernel, init.Kernel("norm_grad.cl", "layer_norm_grad_f32"));
  TRAIND_ASSIGN_OR_RETURN(ClKernel parameters_kernel, init.Kernel("norm_grad.cl", "layer_norm_grad_parameters_f32"));
  return MakeGpuKernel<LayerNormGradGpuKernel>(axis, epsilon, std::move(rows_kernel), std::move(parameters_kernel));
}

}  // namespace traind::engine::gpu
