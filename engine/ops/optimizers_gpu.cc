// GPU kernels of traind's fused AdamW and SGD (optimizers.cl): parameters, gradients and moments stay on the
// device; the learning rate and step are host inputs, the scalars derived from them computed on the host as the
// CPU kernel does (MakeAdamWStepScalars). ONNX's Adam / Momentum / Adagrad stay on the CPU. Their contract is
// optimizers.h's.
#include "engine/ops/gpu_util.h"
#include "engine/ops/optimizers.h"
#include "engine/training/optimizer.h"

namespace traind::engine::gpu {
namespace {

class FusedOptimizerGpuKernel : public GpuKernel {
 public:
  FusedOptimizerGpuKernel(const char* name, int parameters, int states, float max_grad_norm, ClKernel partial,
                          ClKernel finish, ClKernel update)
      : name_(name),
        parameters_(parameters),
        states_(states),
        max_grad_norm_(max_grad_norm),
        partial_(std::move(partial)),
        finish_(std::move(finish)),
        update_(std::move(update)) {}
  bool IsHostInput(int input) const override { return input < 2; }

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const FusedOptimizerInputs checked,
                            CheckFusedOptimizerInputs(name_, context.inputs(), parameters_, states_));
    const std::vector<std::vector<const Tensor*>>& tensors = checked.tensors;
    // The global gradient norm, on the device.
    const size_t size = context.work_group_size();
    std::vector<int64_t> groups(parameters_);
    int64_t partial_count = 0;
    for (int p = 0; p < parameters_; ++p) {
      const int64_t n = tensors[p][1]->num_elements();
      groups[p] = std::clamp<int64_t>((n + static_cast<int64_t>(size) * 16 - 1) / (static_cast<int64_t>(size) * 16),
                                      1, 256);
      partial_count += groups[p];
    }
    TRAIND_ASSIGN_OR_RETURN(DeviceMemory partial, context.Scratch(static_cast<size_t>(partial_count) * sizeof(float)));
    TRAIND_ASSIGN_OR_RETURN(DeviceMemory state, context.Scratch(2 * sizeof(float)));
    int64_t offset = 0;
    for (int p = 0; p < parameters_; ++p) {
      TRAIND_RETURN_IF_ERROR(partial_.LaunchGroups(context, groups[p], size, context.mem(*tensors[p][1]),
                                                   partial.mem(), tensors[p][1]->num_elements(), offset,
                                                   LocalMemory{size * sizeof(float)}));
      offset += groups[p];
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor * skipped, context.AllocateOutput(0, DataType::kBool, Shape{}));
    TRAIND_RETURN_IF_ERROR(finish_.LaunchGroups(context, 1, size, partial.mem(), partial_count, state.mem(),
                                                context.mem(*skipped), max_grad_norm_,
                                                LocalMemory{size * sizeof(float)}));
    for (int p = 0; p < parameters_; ++p) {
      std::vector<cl_mem> out;
      for (int k = 0; k < 1 + states_; ++k) {
        TRAIND_ASSIGN_OR_RETURN(Tensor * tensor, context.AllocateOutput(1 + p * (1 + states_) + k, DataType::kFloat32,
                                                                        tensors[p][0]->shape()));
        out.push_back(context.mem(*tensor));
      }
      std::vector<cl_mem> in;
      for (const Tensor* tensor : tensors[p]) in.push_back(context.mem(*tensor));
      TRAIND_RETURN_IF_ERROR(
          Update(context, checked.learning_rate, checked.step, state.mem(), in, out, tensors[p][0]->num_elements()));
    }
    return absl::OkStatus();
  }

 protected:
  // in: p, gradient, states; out: p', states'.
  virtual absl::Status Update(GpuKernelContext& context, float learning_rate, int64_t step, cl_mem state,
                              const std::vector<cl_mem>& in, const std::vector<cl_mem>& out, int64_t n) const = 0;
  const ClKernel& update() const { return update_; }

 private:
  const char* name_;
  int parameters_;
  int states_;
  float max_grad_norm_;
  ClKernel partial_;
  ClKernel finish_;
  ClKernel update_;
};

class AdamWGpuKernel final : public FusedOptimizerGpuKernel {
 public:
  AdamWGpuKernel(int parameters, float max_grad_norm, AdamWOptions options, ClKernel partial, ClKernel finish,
                 ClKernel update)
      : FusedOptimizerGpuKernel("AdamW", parameters, 2, max_grad_norm, std::move(partial), std::move(finish),
                                std::move(update)),
        options_(options) {}

 protected:
  absl::Status Update(GpuKernelContext& context, float learning_rate, int64_t step, cl_mem state,
                      const std::vector<cl_mem>& in, const std::vector<cl_mem>& out, int64_t n) const override {
    AdamWOptions options = options_;
    options.lr = learning_rate;
    const AdamWStepScalars s = MakeAdamWStepScalars(options, step);
    return update().Launch1D(context, n, in[0], in[1], in[2], in[3], out[0], out[1], out[2], n, state, s.beta1,
                             s.one_minus_beta1, s.beta2, s.one_minus_beta2, s.eps, s.decay, s.step_size,
                             s.bias2_sqrt);
  }

 private:
  AdamWOptions options_;
};

class SgdGpuKernel final : public FusedOptimizerGpuKernel {
 public:
  SgdGpuKernel(int parameters, float max_grad_norm, SgdOptions options, ClKernel partial, ClKernel finish,
               ClKernel update)
      : FusedOptimizerGpuKernel("SGD", parameters, options.momentum != 0.0f ? 1 : 0, max_grad_norm,
                                std::move(partial), std::move(finish), std::move(update)),
        options_(options) {}

 protected:
  absl::Status Update(GpuKernelContext& context, float learning_rate, int64_t step, cl_mem state,
                      const std::vector<cl_mem>& in, const std::vector<cl_mem>& out, int64_t n) const override {
    const bool momentum = options_.momentum != 0.0f;
    // Without momentum there is no buffer: the parameter stands in for the unused arguments.
    return update().Launch1D(context, n, in[0], in[1], momentum ? in[2] : in[0], out[0], momentum ? out[1] : out[0],
                             n, state, learning_rate, options_.weight_decay, options_.momentum,
                             1.0f - options_.dampening, static_cast<int32_t>(options_.nesterov),
                             static_cast<int32_t>(step == 1), static_cast<int32_t>(momentum));
  }

 private:
  SgdOptions options_;
};

struct OptimizerKernels {
  ClKernel partial, finish, update;
};

absl::StatusOr<OptimizerKernels> Kernels(const GpuKernelInit& init, const char* update) {
  OptimizerKernels kernels;
  TRAIND_ASSIGN_OR_RETURN(kernels.partial, init.Kernel("optimizers.cl", "sum_of_squares_partial"));
  TRAIND_ASSIGN_OR_RETURN(kernels.finish, init.Kernel("optimizers.cl", "finish_norm"));
  TRAIND_ASSIGN_OR_RETURN(kernels.update, init.Kernel("optimizers.cl", update));
  return kernels;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateAdamWGpuKernel(const GpuKernelInit& init) {
  for (int i = 2; i < init.num_inputs(); ++i) TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {i}));
  TRAIND_ASSIGN_OR_RETURN(const FusedAdamWAttributes attributes, ParseFusedAdamWAttributes(init));
  TRAIND_ASSIGN_OR_RETURN(OptimizerKernels kernels, Kernels(init, "adamw_update_f32"));
  return MakeGpuKernel<AdamWGpuKernel>(attributes.parameters, attributes.max_grad_norm, attributes.options,
                                       std::move(kernels.partial), std::move(kernels.finish),
                                       std::move(kernels.update));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateSgdGpuKernel(const GpuKernelInit& init) {
  for (int i = 2; i < init.num_inputs(); ++i) TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {i}));
  TRAIND_ASSIGN_OR_RETURN(const FusedSgdAttributes attributes, ParseFusedSgdAttributes(init));
  TRAIND_ASSIGN_OR_RETURN(OptimizerKernels kernels, Kernels(init, "sgd_update_f32"));
  return MakeGpuKernel<SgdGpuKernel>(attributes.parameters, attributes.max_grad_norm, attributes.options,
                                     std::move(kernels.partial), std::move(kernels.finish), std::move(kernels.update));
}

}  // namespace traind::engine::gpu
