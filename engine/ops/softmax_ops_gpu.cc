// GPU kernels of Softmax and LogSoftmax (softmax_ops.cl), float32: opset 13+ along `axis`, opsets 1-12 over the
// input coerced to 2-D at `axis`, as the CPU kernels.
#include "engine/ops/axis_split.h"
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {
namespace {

class SoftmaxGpuKernel final : public GpuKernel {
 public:
  SoftmaxGpuKernel(ClKernel kernel, int64_t axis, bool coerce_to_2d, bool log)
      : kernel_(std::move(kernel)), axis_(axis), coerce_to_2d_(coerce_to_2d), log_(log) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    AxisSplit split;
    if (x->rank() > 0) {
      TRAIND_ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(axis_, x->rank()));
      if (coerce_to_2d_) {
        split.outer = DimProduct(x->shape(), 0, static_cast<size_t>(axis));
        split.axis_dim = DimProduct(x->shape(), static_cast<size_t>(axis), x->shape().size());
      } else {
        split = SplitAtAxis(x->shape(), axis);
      }
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
    const int64_t positions = split.outer * split.inner;
    return kernel_.Launch1D(context, positions, context.mem(*x), context.mem(*y), positions, split.axis_dim,
                            split.inner, static_cast<int32_t>(log_));
  }

 private:
  ClKernel kernel_;
  int64_t axis_;
  bool coerce_to_2d_;
  bool log_;
};

absl::StatusOr<std::unique_ptr<GpuKernel>> MakeSoftmax(const GpuKernelInit& init, bool log) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0}));
  const bool coerce_to_2d = init.opset() < 13;
  TRAIND_ASSIGN_OR_RETURN(const int64_t axis, init.GetInt("axis", coerce_to_2d ? 1 : -1));
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("softmax_ops.cl", "softmax_f32"));
  return MakeGpuKernel<SoftmaxGpuKernel>(std::move(kernel), axis, coerce_to_2d, log);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateSoftmaxGpuKernel(const GpuKernelInit& init) {
  return MakeSoftmax(init, false);
}
absl::StatusOr<std::unique_ptr<GpuKernel>> CreateLogSoftmaxGpuKernel(const GpuKernelInit& init) {
  return MakeSoftmax(init, true);
}

}  // namespace traind::engine::gpu
