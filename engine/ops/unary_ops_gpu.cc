// GPU kernels of the unary elementwise ops (unary_ops.cl); float32, the CPU kernels keep the other dtypes.
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {
namespace {

class UnaryGpuKernel final : public GpuKernel {
 public:
  UnaryGpuKernel(ClKernel kernel, float alpha, float gamma)
      : kernel_(std::move(kernel)), alpha_(alpha), gamma_(gamma) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
    const int64_t n = x->num_elements();
    return kernel_.Launch1D(context, n, context.mem(*x), context.mem(*y), n, alpha_, gamma_);
  }

 private:
  ClKernel kernel_;
  float alpha_;
  float gamma_;
};

absl::StatusOr<std::unique_ptr<GpuKernel>> MakeUnary(const GpuKernelInit& init, const char* name, float alpha = 0,
                                                     float gamma = 0) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0}));
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("unary_ops.cl", name));
  return MakeGpuKernel<UnaryGpuKernel>(std::move(kernel), alpha, gamma);
}

}  // namespace

#define TRAIND_DEFINE_UNARY_GPU(OpName, kernel_name)                                              \
  absl::StatusOr<std::unique_ptr<GpuKernel>> Create##OpName##GpuKernel(const GpuKernelInit& init) { \
    return MakeUnary(init, kernel_name);                                                          \
  }
TRAIND_DEFINE_UNARY_GPU(Relu, "relu_f32")
TRAIND_DEFINE_UNARY_GPU(Neg, "neg_f32")
TRAIND_DEFINE_UNARY_GPU(Abs, "abs_f32")
TRAIND_DEFINE_UNARY_GPU(Exp, "exp_f32")
TRAIND_DEFINE_UNARY_GPU(Log, "log_f32")
TRAIND_DEFINE_UNARY_GPU(Sqrt, "sqrt_f32")
TRAIND_DEFINE_UNARY_GPU(Erf, "erf_f32")
TRAIND_DEFINE_UNARY_GPU(Tanh, "tanh_f32")
TRAIND_DEFINE_UNARY_GPU(Reciprocal, "reciprocal_f32")
TRAIND_DEFINE_UNARY_GPU(Sigmoid, "sigmoid_f32")
TRAIND_DEFINE_UNARY_GPU(Softplus, "softplus_f32")
#undef TRAIND_DEFINE_UNARY_GPU

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateLeakyReluGpuKernel(const GpuKernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(const float alpha, init.GetFloat("alpha", 0.01f));
  return MakeUnary(init, "leaky_relu_f32", alpha);
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateEluGpuKernel(const GpuKernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(const float alpha, init.GetFloat("alpha", 1.0f));
  return MakeUnary(init, "elu_f32", alpha);
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateSeluGpuKernel(const GpuKernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(const float alpha, init.GetFloat("alpha", 1.67326319217681884765625f));
  TRAIND_ASSIGN_OR_RETURN(const float gamma, init.GetFloat("gamma", 1.05070102214813232421875f));
  return MakeUnary(init, "selu_f32", alpha, gamma);
}

}  // namespace traind::engine::gpu
