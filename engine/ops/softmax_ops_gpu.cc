// GPU kernels of Softmax, LogSoftmax and SoftmaxGrad (softmax_ops.cl), float32; their contract (opset 13+ along
// `axis`, opsets 1-12 over the input coerced to 2-D at `axis`) is softmax_ops.h's.
#include "engine/ops/gpu_util.h"
#include "engine/ops/softmax_ops.h"

namespace traind::engine::gpu {
namespace {

class SoftmaxGpuKernel final : public GpuKernel {
 public:
  SoftmaxGpuKernel(ClKernel kernel, SoftmaxAttributes attributes, bool log)
      : kernel_(std::move(kernel)), attributes_(attributes), log_(log) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const AxisSplit split, SoftmaxSplit(*x, attributes_));
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
    const int64_t positions = split.outer * split.inner;
    return kernel_.Launch1D(context, positions, context.mem(*x), context.mem(*y), positions, split.axis_dim,
                            split.inner, static_cast<int32_t>(log_));
  }

 private:
  ClKernel kernel_;
  SoftmaxAttributes attributes_;
  bool log_;
};

absl::StatusOr<std::unique_ptr<GpuKernel>> MakeSoftmax(const GpuKernelInit& init, bool log) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0}));
  TRAIND_ASSIGN_OR_RETURN(const SoftmaxAttributes attributes, ParseSoftmaxAttributes(init));
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("softmax_ops.cl", "softmax_f32"));
  return MakeGpuKernel<SoftmaxGpuKernel>(std::move(kernel), attributes, log);
}

class SoftmaxGradGpuKernel final : public GpuKernel {
 public:
  SoftmaxGradGpuKernel(ClKernel kernel, SoftmaxAttributes attributes)
      : kernel_(std::move(kernel)), attributes_(attributes) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* dy, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* y, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const AxisSplit split, CheckSoftmaxGradInputs(*dy, *y, attributes_));
    TRAIND_ASSIGN_OR_RETURN(Tensor * dx, context.AllocateOutput(0, y->dtype(), y->shape()));
    const int64_t positions = split.outer * split.inner;
    return kernel_.Launch1D(context, positions, context.mem(*dy), context.mem(*y), context.mem(*dx), positions,
                            split.axis_dim, split.inner);
  }

 private:
  ClKernel kernel_;
  SoftmaxAttributes attributes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateSoftmaxGradGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1}));
  TRAIND_ASSIGN_OR_RETURN(const SoftmaxAttributes attributes, ParseSoftmaxGradAttributes(init));
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("softmax_ops.cl", "softmax_grad_f32"));
  return MakeGpuKernel<SoftmaxGradGpuKernel>(std::move(kernel), attributes);
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateSoftmaxGpuKernel(const GpuKernelInit& init) {
  return MakeSoftmax(init, false);
}
absl::StatusOr<std::unique_ptr<GpuKernel>> CreateLogSoftmaxGpuKernel(const GpuKernelInit& init) {
  return MakeSoftmax(init, true);
}

}  // namespace traind::engine::gpu
