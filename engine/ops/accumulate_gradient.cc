// AccumulateGradient (domain ai.traind.training, schema in engine/model/traind_schemas.cc): the gradient
// accumulation of GenerateArtifacts' training model, ONNX Runtime's lazy-reset semantics in one pass:
//   accumulated = reset ? gradient : buffer + gradient
// With reset set the buffer is not read (it may hold anything, e.g. the previous step's gradient), and the output
// aliases the gradient (kernels never write their inputs, so aliasing is safe).
#include "engine/ops/accumulate_gradient.h"

#include "absl/strings/str_cat.h"
#include "engine/core/shape.h"
#include "engine/core/status_macros.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

absl::Status CheckAccumulateGradientNode(const KernelInit& init) {
  if (init.num_inputs() != 3 || !init.has_input(0) || !init.has_input(1) || !init.has_input(2)) {
    return init.Error("expects inputs buffer, gradient, reset");
  }
  return absl::OkStatus();
}

absl::Status CheckAccumulateGradientInputs(const Tensor& buffer, const Tensor& gradient, const Tensor& reset) {
  if (reset.dtype() != DataType::kBool || reset.num_elements() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("AccumulateGradient: reset must be a bool scalar; got ",
                                                   DataTypeName(reset.dtype()), " of shape ",
                                                   ShapeToString(reset.shape())));
  }
  if (buffer.dtype() != gradient.dtype() || buffer.shape() != gradient.shape()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AccumulateGradient: the buffer (", DataTypeName(buffer.dtype()), " ",
                     ShapeToString(buffer.shape()), ") must have the gradient's type and shape (",
                     DataTypeName(gradient.dtype()), " ", ShapeToString(gradient.shape()), ")"));
  }
  return absl::OkStatus();
}

namespace {

class AccumulateGradientKernel final : public Kernel {
 public:
  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* buffer, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* gradient, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* reset, context.RequiredInput(2));
    TRAIND_RETURN_IF_ERROR(CheckAccumulateGradientInputs(*buffer, *gradient, *reset));
    if (*reset->data<uint8_t>() != 0) {
      context.SetOutput(0, *gradient);
      return absl::OkStatus();
    }
    return DispatchAmong<TRAIND_FLOAT_TYPES>(gradient->dtype(), "AccumulateGradient", [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      TRAIND_ASSIGN_OR_RETURN(Tensor * out, context.AllocateOutput(0, gradient->dtype(), gradient->shape()));
      const T* a = buffer->data<T>();
      const T* b = gradient->data<T>();
      T* sum = out->mutable_data<T>();
      context.threads().ParallelFor(gradient->num_elements(), kParallelElementThreshold,
                                    [&](int64_t begin, int64_t end) {
                                      for (int64_t i = begin; i < end; ++i) sum[i] = a[i] + b[i];
                                    });
      return absl::OkStatus();
    });
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateAccumulateGradientKernel(const KernelInit& init) {
  TRAIND_RETURN_IF_ERROR(CheckAccumulateGradientNode(init));
  return std::unique_ptr<Kernel>(new AccumulateGradientKernel());
}

}  // namespace traind::engine
