// GPU kernels of BatchNormalization (training mode with running statistics from opset 14, inference mode from 9)
// and LayerNormalization (norm_ops.cl), float32. Attributes were validated by the CPU factory when the plan was
// compiled; these only read them.
#include "absl/strings/str_cat.h"
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {
namespace {

absl::Status CheckParameter(const char* what, const Tensor& t, int64_t size) {
  if (t.dtype() != DataType::kFloat32 || t.num_elements() != size) {
    return absl::InvalidArgumentError(
        absl::StrCat("BatchNormalization: ", what, " ", t.DebugString(), " must have ", size, " float elements"));
  }
  return absl::OkStatus();
}

class BatchNormGpuKernel final : public GpuKernel {
 public:
  BatchNormGpuKernel(float epsilon, float momentum, bool training, ClKernel statistics, ClKernel apply,
                     ClKernel inference)
      : epsilon_(epsilon),
        momentum_(momentum),
        training_(training),
        statistics_(std::move(statistics)),
        apply_(std::move(apply)),
        inference_(std::move(inference)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    const Tensor* params[4];
    for (int i = 0; i < 4; ++i) {
      TRAIND_ASSIGN_OR_RETURN(params[i], context.RequiredInput(i + 1));
    }
    if (x->rank() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("BatchNormalization: input must be [N, C, ...], got ", x->DebugString()));
    }
    const int64_t batch = x->dim(0), features = x->dim(1);
    const int64_t row = DimProduct(x->shape(), 2, x->shape().size());
    static const char* const kNames[] = {"scale", "B", "input_mean", "input_var"};
    for (int i = 0; i < 4; ++i) TRAIND_RETURN_IF_ERROR(CheckParameter(kNames[i], *params[i], features));
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
    const int64_t n = x->num_elements();
    if (!training_) {
      return inference_.Launch1D(context, n, context.mem(*x), context.mem(*y), context.mem(*params[0]),
                                 context.mem(*params[1]), context.mem(*params[2]), context.mem(*params[3]), n,
                                 features, row, epsilon_);
    }
    if (batch * row == 0) return absl::InvalidArgumentError("BatchNormalization: training mode on an empty batch");
    TRAIND_ASSIGN_OR_RETURN(Tensor * running_mean, context.AllocateOutput(1, x->dtype(), params[2]->shape()));
    TRAIND_ASSIGN_OR_RETURN(Tensor * running_var, context.AllocateOutput(2, x->dtype(), params[3]->shape()));
    TRAIND_ASSIGN_OR_RETURN(DeviceMemory stats, context.Scratch(static_cast<size_t>(3 * features) * sizeof(float)));
    const size_t group = context.work_group_size();
    TRAIND_RETURN_IF_ERROR(statistics_.LaunchGroups(
        context, features, group, context.mem(*x), context.mem(*params[0]), context.mem(*params[2]),
        context.mem(*params[3]), context.mem(*running_mean), context.mem(*running_var), stats.mem(), batch, features,
        row, momentum_, epsilon_, LocalMemory{group * sizeof(float)}));
    return apply_.Launch1D(context, n, context.mem(*x), context.mem(*y), stats.mem(), context.mem(*params[1]), n,
                           features, row);
  }

 private:
  float epsilon_;
  float momentum_;
  bool training_;
  ClKernel statistics_;
  ClKernel apply_;
  ClKernel inference_;
};

class LayerNormGpuKernel final : public GpuKernel {
 public:
  LayerNormGpuKernel(int64_t axis, float epsilon, ClKernel kernel)
      : axis_(axis), epsilon_(epsilon), kernel_(std::move(kernel)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* scale, context.RequiredInput(1));
    const Tensor* bias = context.input(2);
    TRAIND_ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(axis_, x->rank()));
    const int64_t rows = DimProduct(x->shape(), 0, static_cast<size_t>(axis));
    const int64_t row = DimProduct(x->shape(), static_cast<size_t>(axis), x->shape().size());
    auto is_scalar = [&](const Tensor& t, const char* what) -> absl::StatusOr<bool> {
      if (t.num_elements() == 1) return true;
      if (t.num_elements() == row) return false;
      return absl::UnimplementedError(absl::StrCat("LayerNormalization: ", what, " ", t.DebugString(),
                                                   " neither one element nor the normalized shape"));
    };
    TRAIND_ASSIGN_OR_RETURN(const bool scale_is_scalar, is_scalar(*scale, "Scale"));
    bool bias_is_scalar = false;
    if (bias != nullptr) {
      TRAIND_ASSIGN_OR_RETURN(bias_is_scalar, is_scalar(*bias, "B"));
    }
    Shape stat_shape = x->shape();
    for (size_t d = static_cast<size_t>(axis); d < stat_shape.size(); ++d) stat_shape[d] = 1;
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
    TRAIND_ASSIGN_OR_RETURN(Tensor * mean, context.AllocateOutput(1, DataType::kFloat32, stat_shape));
    TRAIND_ASSIGN_OR_RETURN(Tensor * inv_std, context.AllocateOutput(2, DataType::kFloat32, stat_shape));
    if (row == 0 || rows == 0) return absl::OkStatus();
    const size_t group = context.work_group_size();
    return kernel_.LaunchGroups(context, rows, group, context.mem(*x), context.mem(*scale),
                                context.mem(bias != nullptr ? *bias : *scale), context.mem(*y), context.mem(*mean),
                                context.mem(*inv_std), row, epsilon_, static_cast<int32_t>(scale_is_scalar),
                                static_cast<int32_t>(bias != nullptr), static_cast<int32_t>(bias_is_scalar),
                                LocalMemory{group * sizeof(float)});
  }

 private:
  int64_t axis_;
  float epsilon_;
  ClKernel kernel_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateBatchNormalizationGpuKernel(const GpuKernelInit& init) {
  if (init.opset() < 9) return init.Unsupported("the 'spatial' attribute (opset < 9)");
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1, 2, 3, 4}));
  TRAIND_ASSIGN_OR_RETURN(const float epsilon, init.GetFloat("epsilon", 1e-5f));
  TRAIND_ASSIGN_OR_RETURN(const float momentum, init.GetFloat("momentum", 0.9f));
  int64_t training_mode = 0;
  if (init.opset() >= 14) {
    TRAIND_ASSIGN_OR_RETURN(training_mode, init.GetInt("training_mode", 0));
  }
  TRAIND_ASSIGN_OR_RETURN(ClKernel statistics, init.Kernel("norm_ops.cl", "batch_norm_statistics_f32"));
  TRAIND_ASSIGN_OR_RETURN(ClKernel apply, init.Kernel("norm_ops.cl", "batch_norm_apply_f32"));
  TRAIND_ASSIGN_OR_RETURN(ClKernel inference, init.Kernel("norm_ops.cl", "batch_norm_inference_f32"));
  return MakeGpuKernel<BatchNormGpuKernel>(epsilon, momentum, training_mode == 1, std::move(statistics),
                                           std::move(apply), std::move(inference));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateLayerNormalizationGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1, 2}));
  TRAIND_ASSIGN_OR_RETURN(const int64_t axis, init.GetInt("axis", -1));
  TRAIND_ASSIGN_OR_RETURN(const float epsilon, init.GetFloat("epsilon", 1e-5f));
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("norm_ops.cl", "layer_norm_f32"));
  return MakeGpuKernel<LayerNormGpuKernel>(axis, epsilon, std::move(kernel));
}

}  // namespace traind::engine::gpu
