// GPU kernel of ConstantOfShape with a float32 value: the shape is read on the host, the device memory filled in
// place (clEnqueueFillBuffer), so a zero tensor the backward pass starts from is never uploaded.
#include <cstring>

#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {
namespace {

class ConstantOfShapeGpuKernel final : public GpuKernel {
 public:
  explicit ConstantOfShapeGpuKernel(float value) : value_(value) {}
  bool IsHostInput(int /*input*/) const override { return true; }

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* shape_tensor, context.RequiredInput(0));
    if (shape_tensor->dtype() != DataType::kInt64 || shape_tensor->rank() != 1) {
      return absl::InvalidArgumentError("ConstantOfShape: input must be a 1-D int64 tensor");
    }
    const int64_t* dims = shape_tensor->data<int64_t>();
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, DataType::kFloat32,
                                                               Shape(dims, dims + shape_tensor->num_elements())));
    return context.stream().Fill(context.mem(*y), value_, y->num_elements());
  }

 private:
  float value_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateConstantOfShapeGpuKernel(const GpuKernelInit& init) {
  float value = 0.0f;
  if (init.HasAttribute("value")) {
    TRAIND_ASSIGN_OR_RETURN(Tensor tensor, init.GetTensor("value"));
    if (tensor.dtype() != DataType::kFloat32 || tensor.num_elements() != 1) {
      return init.Unsupported("the GPU fills float32 values only");
    }
    value = *tensor.data<float>();
  }
  return MakeGpuKernel<ConstantOfShapeGpuKernel>(value);
}

}  // namespace traind::engine::gpu
