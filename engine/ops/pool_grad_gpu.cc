// GPU kernel of MaxPoolGrad (pool_grad.cl), float32, 1 or 2 spatial dims; its contract is pool_ops.h's.
#include "engine/ops/gpu_pool.h"
#include "engine/ops/gpu_util.h"
#include "engine/ops/pool_ops.h"

namespace traind::engine::gpu {
namespace {

class MaxPoolGradGpuKernel final : public GpuKernel {
 public:
  MaxPoolGradGpuKernel(PoolAttributes attributes, ClKernel kernel)
      : attributes_(std::move(attributes)), kernel_(std::move(kernel)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* dy, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(PoolShape shape, CheckMaxPoolGradInputs(*dy, *x, attributes_));
    TRAIND_ASSIGN_OR_RETURN(const PoolWindow window,
                            MakePoolWindow("MaxPoolGrad", shape.window, std::move(shape.output)));
    TRAIND_ASSIGN_OR_RETURN(Tensor * dx, context.AllocateOutput(0, x->dtype(), x->shape()));
    const int64_t n = x->num_elements();
    return window.Launch(kernel_, context, n, context.mem(*dy), context.mem(*x), context.mem(*dx), n);
  }

 private:
  PoolAttributes attributes_;
  ClKernel kernel_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateMaxPoolGradGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1}));
  TRAIND_ASSIGN_OR_RETURN(PoolAttributes attributes, ParsePoolAttributes(init, /*max=*/true));
  if (attributes.spatial.kernel_shape.size() > 2) return init.Unsupported("pooling over 3 spatial dims");
  TRAIND_ASSIGN_OR_RETURN(const int64_t channels_last, init.GetInt("channels_last", 0));
  if (channels_last != 0) return init.Unsupported("channels-last activations (CPU plans only)");
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("pool_grad.cl", "max_pool_grad_f32"));
  return MakeGpuKernel<MaxPoolGradGpuKernel>(std::move(attributes), std::move(kernel));
}

}  // namespace traind::engine::gpu
