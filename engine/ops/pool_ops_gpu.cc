// GPU kernels of MaxPool (without the Indices output), AveragePool (1 or 2 spatial dims), GlobalAveragePool and
// GlobalMaxPool (pool_ops.cl), float32; their contract is pool_ops.h's.
#include "engine/ops/gpu_pool.h"
#include "engine/ops/gpu_util.h"
#include "engine/ops/pool_ops.h"

namespace traind::engine::gpu {
namespace {

class PoolGpuKernel final : public GpuKernel {
 public:
  PoolGpuKernel(bool max, PoolAttributes attributes, ClKernel kernel)
      : max_(max), attributes_(std::move(attributes)), kernel_(std::move(kernel)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    const char* name = max_ ? "MaxPool" : "AveragePool";
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(PoolShape shape, CheckPoolInputs(name, *x, attributes_));
    TRAIND_ASSIGN_OR_RETURN(const PoolWindow window, MakePoolWindow(name, shape.window, std::move(shape.output)));
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), window.output_shape));
    const int64_t n = y->num_elements();
    if (max_) return window.Launch(kernel_, context, n, context.mem(*x), context.mem(*y), n);
    return window.Launch(kernel_, context, n, context.mem(*x), context.mem(*y), n,
                         static_cast<int32_t>(attributes_.count_include_pad));
  }

 private:
  bool max_;
  PoolAttributes attributes_;
  ClKernel kernel_;
};

class GlobalPoolGpuKernel final : public GpuKernel {
 public:
  GlobalPoolGpuKernel(bool max, ClKernel kernel) : max_(max), kernel_(std::move(kernel)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(Shape out_shape, CheckGlobalPoolInput(max_ ? "GlobalMaxPool" : "GlobalAveragePool", *x));
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), std::move(out_shape)));
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
  TRAIND_ASSIGN_OR_RETURN(PoolAttributes attributes, ParsePoolAttributes(init, max));
  if (attributes.spatial.kernel_shape.size() > 2) return init.Unsupported("pooling over 3 spatial dims");
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("pool_ops.cl", max ? "max_pool_f32" : "average_pool_f32"));
  return MakeGpuKernel<PoolGpuKernel>(max, std::move(attributes), std::move(kernel));
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
