// GPU kernel of MaxPoolGrad (pool_grad.cl), float32, 1 or 2 spatial dims.
#include "absl/strings/str_cat.h"
#include "engine/ops/gpu_pool.h"
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {
namespace {

class MaxPoolGradGpuKernel final : public GpuKernel {
 public:
  MaxPoolGradGpuKernel(SpatialAttributes attributes, bool ceil_mode, ClKernel kernel)
      : attributes_(std::move(attributes)), ceil_mode_(ceil_mode), kernel_(std::move(kernel)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* dy, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(PoolWindow window, ResolvePoolWindow("MaxPoolGrad", *x, attributes_, ceil_mode_));
    if (dy->shape() != window.output_shape || dy->dtype() != x->dtype()) {
      return absl::InvalidArgumentError(absl::StrCat("MaxPoolGrad: dY ", dy->DebugString(), " must be ",
                                                     ShapeToString(window.output_shape)));
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor * dx, context.AllocateOutput(0, x->dtype(), x->shape()));
    const int64_t n = x->num_elements();
    return window.Launch(kernel_, context, n, context.mem(*dy), context.mem(*x), context.mem(*dx), n);
  }

 private:
  SpatialAttributes attributes_;
  bool ceil_mode_;
  ClKernel kernel_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateMaxPoolGradGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1}));
  TRAIND_ASSIGN_OR_RETURN(SpatialAttributes attributes, SpatialAttributes::Parse(init, /*allow_dilations=*/true));
  if (attributes.kernel_shape.empty()) return init.Error("attribute 'kernel_shape' is required");
  if (attributes.kernel_shape.size() > 2) return init.Unsupported("pooling over 3 spatial dims");
  TRAIND_ASSIGN_OR_RETURN(const int64_t ceil_mode, init.GetInt("ceil_mode", 0));
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("pool_grad.cl", "max_pool_grad_f32"));
  return MakeGpuKernel<MaxPoolGradGpuKernel>(std::move(attributes), ceil_mode != 0, std::move(kernel));
}

}  // namespace traind::engine::gpu
