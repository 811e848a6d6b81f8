// GPU kernels of BatchNormalizationGrad and LayerNormalizationGrad (norm_grad.cl), float32.
#include "absl/strings/str_cat.h"
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {
namespace {

absl::Status CheckSameShape(const char* op, const Tensor& dy, const Tensor& x, const Tensor& scale) {
  if (dy.shape() != x.shape() || dy.dtype() != x.dtype() || scale.dtype() != x.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dY ", dy.DebugString(), " must match X ", x.DebugString(),
                                                   " and Scale ", scale.DebugString(), " its dtype"));
  }
  return absl::OkStatus();
}

class BatchNormGradGpuKernel final : public GpuKernel {
 public:
  BatchNormGradGpuKernel(float epsilon, ClKernel kernel) : epsilon_(epsilon), kernel_(std::move(kernel)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* dy, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* scale, context.RequiredInput(2));
    TRAIND_RETURN_IF_ERROR(CheckSameShape("BatchNormalizationGrad", *dy, *x, *scale));
    if (x->rank() < 2 || scale->num_elements() != x->dim(1)) {
      return absl::InvalidArgumentError(absl::StrCat("BatchNormalizationGrad: X ", x->DebugString(), " and Scale ",
                                                     scale->DebugString(), " must be [N, C, ...] and [C]"));
    }
    const int64_t batch = x->dim(0), channels = x->dim(1);
    const int64_t row = DimProduct(x->shape(), 2, x->shape().size());
    if (batch * row == 0) return absl::InvalidArgumentError("BatchNormalizationGrad: empty batch");
    TRAIND_ASSIGN_OR_RETURN(Tensor * dx, context.AllocateOutput(0, x->dtype(), x->shape()));
    TRAIND_ASSIGN_OR_RETURN(Tensor * dscale, context.AllocateOutput(1, x->dtype(), scale->shape()));
    TRAIND_ASSIGN_OR_RETURN(Tensor * dbias, context.AllocateOutput(2, x->dtype(), scale->shape()));
    const size_t group = context.work_group_size();
    return kernel_.LaunchGroups(context, channels, group, context.mem(*dy), context.mem(*x), context.mem(*scale),
                                context.mem(*dx), context.mem(*dscale), context.mem(*dbias), batch, channels, row,
                                epsilon_, LocalMemory{group * sizeof(float)});
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
    TRAIND_RETURN_IF_ERROR(CheckSameShape("LayerNormalizationGrad", *dy, *x, *scale));
    TRAIND_ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(axis_, x->rank()));
    const int64_t rows = DimProduct(x->shape(), 0, static_cast<size_t>(axis));
    const int64_t row = DimProduct(x->shape(), static_cast<size_t>(axis), x->shape().size());
    if (scale->num_elements() != row) {
      return absl::InvalidArgumentError(absl::StrCat("LayerNormalizationGrad: Scale ", scale->DebugString(),
                                                     " must have the normalized size of X ", x->DebugString()));
    }
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
  TRAIND_ASSIGN_OR_RETURN(const float epsilon, init.GetFloat("epsilon", 1e-5f));
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("norm_grad.cl", "batch_norm_grad_f32"));
  return MakeGpuKernel<BatchNormGradGpuKernel>(epsilon, std::move(kernel));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateLayerNormalizationGradGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1, 2}));
  TRAIND_ASSIGN_OR_RETURN(const int64_t axis, init.GetInt("axis", -1));
  TRAIND_ASSIGN_OR_RETURN(const float epsilon, init.GetFloat("epsilon", 1e-5f));
  TRAIND_ASSIGN_OR_RETURN(ClKernel rows_kernel, init.Kernel("norm_grad.cl", "layer_norm_grad_f32"));
  TRAIND_ASSIGN_OR_RETURN(ClKernel parameters_kernel, init.Kernel("norm_grad.cl", "layer_norm_grad_parameters_f32"));
  return MakeGpuKernel<LayerNormGradGpuKernel>(axis, epsilon, std::move(rows_kernel), std::move(parameters_kernel));
}

}  // namespace traind::engine::gpu
