// GPU kernels of BatchNormalization (training mode with running statistics from opset 14, inference mode from 9)
// and LayerNormalization (norm_ops.cl), float32; their contract is norm_ops.h's.
#include "engine/ops/gpu_util.h"
#include "engine/ops/norm_ops.h"

namespace traind::engine::gpu {
namespace {

class BatchNormGpuKernel final : public GpuKernel {
 public:
  BatchNormGpuKernel(BatchNormAttributes attributes, ClKernel statistics, ClKernel apply, ClKernel inference)
      : attributes_(attributes),
        statistics_(std::move(statistics)),
        apply_(std::move(apply)),
        inference_(std::move(inference)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    const Tensor* params[4];
    for (int i = 0; i < 4; ++i) {
      TRAIND_ASSIGN_OR_RETURN(params[i], context.RequiredInput(i + 1));
    }
    TRAIND_ASSIGN_OR_RETURN(const BatchNormShape shape, CheckBatchNormInputs(*x, params, attributes_));
    const int64_t batch = shape.batch, features = shape.features, row = shape.row;
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
    const int64_t n = x->num_elements();
    if (!attributes_.training) {
      return inference_.Launch1D(context, n, context.mem(*x), context.mem(*y), context.mem(*params[0]),
                                 context.mem(*params[1]), context.mem(*params[2]), context.mem(*params[3]), n, features,
                                 row, attributes_.epsilon);
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor * running_mean, context.AllocateOutput(1, x->dtype(), params[2]->shape()));
    TRAIND_ASSIGN_OR_RETURN(Tensor * running_var, context.AllocateOutput(2, x->dtype(), params[3]->shape()));
    TRAIND_ASSIGN_OR_RETURN(DeviceMemory stats, context.Scratch(static_cast<size_t>(3 * features) * sizeof(float)));
    const size_t group = context.work_group_size();
    TRAIND_RETURN_IF_ERROR(statistics_.LaunchGroups(
        context, features, group, context.mem(*x), context.mem(*params[0]), context.mem(*params[2]),
        context.mem(*params[3]), context.mem(*running_mean), context.mem(*running_var), stats.mem(), batch, features,
        row, attributes_.momentum, attributes_.epsilon, LocalMemory{group * sizeof(float)}));
    return apply_.Launch1D(context, n, context.mem(*x), context.mem(*y), stats.mem(), context.mem(*params[1]), n,
                           features, row);
  }

 private:
  BatchNormAttributes attributes_;
  ClKernel statistics_;
  ClKernel apply_;
  ClKernel inference_;
};

class LayerNormGpuKernel final : public GpuKernel {
 public:
  LayerNormGpuKernel(LayerNormAttributes attributes, ClKernel kernel)
      : attributes_(attributes), kernel_(std::move(kernel)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* scale, context.RequiredInput(1));
    const Tensor* bias = context.input(2);
    TRAIND_ASSIGN_OR_RETURN(const LayerNormShape shape, CheckLayerNormInputs(*x, *scale, bias, attributes_.axis));
    const int64_t rows = shape.rows, row = shape.row;
    const Shape& stat_shape = shape.statistics;
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
    TRAIND_ASSIGN_OR_RETURN(Tensor * mean, context.AllocateOutput(1, DataType::kFloat32, stat_shape));
    TRAIND_ASSIGN_OR_RETURN(Tensor * inv_std, context.AllocateOutput(2, DataType::kFloat32, stat_shape));
    if (row == 0 || rows == 0) return absl::OkStatus();
    const size_t group = context.work_group_size();
    return kernel_.LaunchGroups(context, rows, group, context.mem(*x), context.mem(*scale),
                                context.mem(bias != nullptr ? *bias : *scale), context.mem(*y), context.mem(*mean),
                                context.mem(*inv_std), row, attributes_.epsilon,
                                static_cast<int32_t>(shape.scale_is_scalar), static_cast<int32_t>(bias != nullptr),
                                static_cast<int32_t>(shape.bias_is_scalar), LocalMemory{group * sizeof(float)});
  }

 private:
  LayerNormAttributes attributes_;
  ClKernel kernel_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateBatchNormalizationGpuKernel(const GpuKernelInit& init) {
  if (init.opset() < 9) return init.Unsupported("the 'spatial' attribute (opset < 9)");
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1, 2, 3, 4}));
  TRAIND_ASSIGN_OR_RETURN(const BatchNormAttributes attributes, ParseBatchNormAttributes(init));
  TRAIND_ASSIGN_OR_RETURN(ClKernel statistics, init.Kernel("norm_ops.cl", "batch_norm_statistics_f32"));
  TRAIND_ASSIGN_OR_RETURN(ClKernel apply, init.Kernel("norm_ops.cl", "batch_norm_apply_f32"));
  TRAIND_ASSIGN_OR_RETURN(ClKernel inference, init.Kernel("norm_ops.cl", "batch_norm_inference_f32"));
  return MakeGpuKernel<BatchNormGpuKernel>(attributes, std::move(statistics), std::move(apply), std::move(inference));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateLayerNormalizationGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1, 2}));
  TRAIND_ASSIGN_OR_RETURN(const LayerNormAttributes attributes, ParseLayerNormAttributes(init));
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("norm_ops.cl", "layer_norm_f32"));
  return MakeGpuKernel<LayerNormGpuKernel>(attributes, std::move(kernel));
}

}  // namespace traind::engine::gpu
