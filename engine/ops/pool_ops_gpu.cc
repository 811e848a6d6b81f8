// GPU kernels of MaxPool (without the Indices output), AveragePool (1 or 2 spatial dims), GlobalAveragePool and
// GlobalMaxPool (pool_ops.cl), float32; the window comes from the CPU kernels' own attribute parsing and geometry
// (spatial_attributes.h).
#include "absl/strings/str_cat.h"
#include "engine/ops/gpu_pool.h"
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {
namespace {

class PoolGpuKernel final : public GpuKernel {
 public:
  PoolGpuKernel(bool max, SpatialAttributes attributes, bool ceil_mode, bool count_include_pad, ClKernel kernel)
      : max_(max),
        attributes_(std::move(attributes)),
        ceil_mode_(ceil_mode),
        count_include_pad_(count_include_pad),
        kernel_(std::move(kernel)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(PoolWindow window,
                            ResolvePoolWindow(max_ ? "MaxPool" : "AveragePool", *x, attributes_, ceil_mode_));
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), window.output_shape));
    const int64_t n = y->num_elements();
    if (max_) return window.Launch(kernel_, context, n, context.mem(*x), context.mem(*y), n);
    return window.Launch(kernel_, context, n, context.mem(*x), context.mem(*y), n,
                         static_cast<int32_t>(count_include_pad_));
  }

 private:
  bool max_;
  SpatialAttributes attributes_;
  bool ceil_mode_;
  bool count_include_pad_;
  ClKernel kernel_;
};

class GlobalPoolGpuKernel final : public GpuKernel {
 public:
  GlobalPoolGpuKernel(bool max, ClKernel kernel) : max_(max), kernel_(std::move(kernel)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    if (x->rank() < 3) {
      return absl::InvalidArgumentError(absl::StrCat("global pooling: input must be [N, C, spatial...], got ",
                                                     x->DebugString()));
    }
    Shape out_shape(x->shape().size(), 1);
    out_shape[0] = x->dim(0);
    out_shape[1] = x->dim(1);
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), out_shape));
    const int64_t planes = x->dim(0) * x->dim(1);
    const int64_t plane = DimProduct(x->shape(), 2, x->shape().size());
    if (planes == 0) return absl::OkStatus();
    if (max_) return kernel_.Launch1D(context, planes, context.mem(*x), context.mem(*y), planes, plane);
    const size_t group = context.work_group_size();
    return kernel_.LaunchGroups(context, planes, group, context.mem(*x), context.mem(*y), plane,
                                LocalMemory{group * sizeof(float)});
  }

 private:
  bool max_;
  ClKernel kernel_;
};

absl::StatusOr<std::unique_ptr<GpuKernel>> MakePool(const GpuKernelInit& init, bool max) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0}));
  if (max && init.num_outputs() > 1 && !init.node().output(1).empty()) {
    return init.Unsupported("the Indices output");
  }
  TRAIND_ASSIGN_OR_RETURN(SpatialAttributes attributes, SpatialAttributes::Parse(init, /*allow_dilations=*/max));
  if (attributes.kernel_shape.empty()) return init.Error("attribute 'kernel_shape' is required");
  if (attributes.kernel_shape.size() > 2) return init.Unsupported("pooling over 3 spatial dims");
  TRAIND_ASSIGN_OR_RETURN(const int64_t ceil_mode, init.GetInt("ceil_mode", 0));
  int64_t count_include_pad = 0;
  if (!max) {
    TRAIND_ASSIGN_OR_RETURN(count_include_pad, init.GetInt("count_include_pad", 0));
  }
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("pool_ops.cl", max ? "max_pool_f32" : "average_pool_f32"));
  return MakeGpuKernel<PoolGpuKernel>(max, std::move(attributes), ceil_mode != 0, count_include_pad != 0,
                                      std::move(kernel));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateMaxPoolGpuKernel(const GpuKernelInit& init) {
  return MakePool(init, true);
}
absl::StatusOr<std::unique_ptr<GpuKernel>> CreateAveragePoolGpuKernel(const GpuKernelInit& init) {
  return MakePool(init, false);
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateGlobalAveragePoolGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0}));
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("pool_ops.cl", "global_average_pool_f32"));
  return MakeGpuKernel<GlobalPoolGpuKernel>(false, std::move(kernel));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateGlobalMaxPoolGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0}));
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("pool_ops.cl", "global_max_pool_f32"));
  return MakeGpuKernel<GlobalPoolGpuKernel>(true, std::move(kernel));
}

}  // namespace traind::engine::gpu
