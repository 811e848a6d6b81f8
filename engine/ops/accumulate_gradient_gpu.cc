// GPU kernel of AccumulateGradient: reset ? gradient (forwarded, no copy) : buffer + gradient. The reset flag is read
// on the host, so the gradient accumulators never leave the device. The contract is accumulate_gradient.h's.
#include "engine/ops/accumulate_gradient.h"
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {
namespace {

class AccumulateGradientGpuKernel final : public GpuKernel {
 public:
  explicit AccumulateGradientGpuKernel(ClKernel kernel) : kernel_(std::move(kernel)) {}
  bool IsHostInput(int input) const override { return input == 2; }

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* buffer, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* gradient, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* reset, context.RequiredInput(2));
    TRAIND_RETURN_IF_ERROR(CheckAccumulateGradientInputs(*buffer, *gradient, *reset));
    if (*reset->data<uint8_t>() != 0) {
      context.SetOutput(0, *gradient);
      return absl::OkStatus();
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor * sum, context.AllocateOutput(0, gradient->dtype(), gradient->shape()));
    const int64_t n = gradient->num_elements();
    return kernel_.Launch1D(context, n, context.mem(*buffer), context.mem(*gradient), context.mem(*sum), n);
  }

 private:
  ClKernel kernel_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateAccumulateGradientGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(CheckAccumulateGradientNode(init));
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1}));
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("accumulate_gradient.cl", "accumulate_f32"));
  return MakeGpuKernel<AccumulateGradientGpuKernel>(std::move(kernel));
}

}  // namespace traind::engine::gpu
