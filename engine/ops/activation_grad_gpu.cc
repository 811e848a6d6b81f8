// GPU kernels of ReluGrad, ErfGrad and GeluGrad (activation_grad.cl), float32; their contract is activation_grad.h's.
#include "engine/ops/activation_grad.h"
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {
namespace {

class ElementwiseGradGpuKernel final : public GpuKernel {
 public:
  ElementwiseGradGpuKernel(const char* name, ClKernel kernel) : name_(name), kernel_(std::move(kernel)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* dy, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(1));
    TRAIND_RETURN_IF_ERROR(CheckActivationGradInputs(name_, *dy, *x));
    TRAIND_ASSIGN_OR_RETURN(Tensor * dx, context.AllocateOutput(0, x->dtype(), x->shape()));
    const int64_t n = x->num_elements();
    return kernel_.Launch1D(context, n, context.mem(*dy), context.mem(*x), context.mem(*dx), n);
  }

 private:
  const char* name_;
  ClKernel kernel_;
};

absl::StatusOr<std::unique_ptr<GpuKernel>> Make(const GpuKernelInit& init, const char* name, const char* kernel) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1}));
  TRAIND_ASSIGN_OR_RETURN(ClKernel compiled, init.Kernel("activation_grad.cl", kernel));
  return MakeGpuKernel<ElementwiseGradGpuKernel>(name, std::move(compiled));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateReluGradGpuKernel(const GpuKernelInit& init) {
  return Make(init, "ReluGrad", "relu_grad_f32");
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateErfGradGpuKernel(const GpuKernelInit& init) {
  return Make(init, "ErfGrad", "erf_grad_f32");
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateGeluGradGpuKernel(const GpuKernelInit& init) {
  return Make(init, "GeluGrad", "gelu_grad_f32");
}

}  // namespace traind::engine::gpu
