// GPU kernels of Where and Clip (clip_where.cl), float32 values; their contract is clip_where.h's.
#include <limits>

#include "engine/ops/clip_where.h"
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {
namespace {

class WhereGpuKernel final : public GpuKernel {
 public:
  explicit WhereGpuKernel(ClKernel kernel) : kernel_(std::move(kernel)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* condition, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* y, context.RequiredInput(2));
    TRAIND_ASSIGN_OR_RETURN(Shape shape, CheckWhereInputs(*condition, *x, *y));
    TRAIND_ASSIGN_OR_RETURN(BroadcastLayout layout,
                            MakeBroadcastLayout(shape, {condition->shape(), x->shape(), y->shape()}));
    TRAIND_ASSIGN_OR_RETURN(Tensor * output, context.AllocateOutput(0, x->dtype(), std::move(shape)));
    const int64_t n = output->num_elements();
    return kernel_.Launch1D(context, n, context.mem(*condition), context.mem(*x), context.mem(*y),
                            context.mem(*output), n, layout.dims, layout.strides[0], layout.strides[1],
                            layout.strides[2]);
  }

 private:
  ClKernel kernel_;
};

class ClipGpuKernel final : public GpuKernel {
 public:
  explicit ClipGpuKernel(ClKernel kernel) : kernel_(std::move(kernel)) {}
  bool IsHostInput(int input) const override { return input > 0; }  // the bounds

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    float low = std::numeric_limits<float>::lowest(), high = std::numeric_limits<float>::max();
    for (int i : {1, 2}) {
      const Tensor* bound = context.input(i);
      TRAIND_RETURN_IF_ERROR(CheckClipBound(bound, *x));
      if (bound != nullptr) (i == 1 ? low : high) = *bound->data<float>();
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
    const int64_t n = x->num_elements();
    return kernel_.Launch1D(context, n, context.mem(*x), context.mem(*y), n, low, high);
  }

 private:
  ClKernel kernel_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateWhereGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {1, 2}));
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("clip_where.cl", "where_f32"));
  return MakeGpuKernel<WhereGpuKernel>(std::move(kernel));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateClipGpuKernel(const GpuKernelInit& init) {
  if (init.opset() < 11) return init.Unsupported("bounds as attributes (opset < 11)");
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1, 2}));
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("clip_where.cl", "clip_f32"));
  return MakeGpuKernel<ClipGpuKernel>(std::move(kernel));
}

}  // namespace traind::engine::gpu
