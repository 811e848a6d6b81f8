// GPU kernel of ConstantOfShape with a float32 value: the shape is read on the host, the device memory filled in
// place (clEnqueueFillBuffer), so a zero tensor the backward pass starts from is never uploaded.
#include "engine/ops/constant_ops.h"
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {
namespace {

class ConstantOfShapeGpuKernel final : public GpuKernel {
 public:
  explicit ConstantOfShapeGpuKernel(float value) : value_(value) {}
  bool IsHostInput(int /*input*/) const override { return true; }

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* shape_tensor, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(Shape shape, ConstantOfShapeOutputShape(*shape_tensor));
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, DataType::kFloat32, std::move(shape)));
    return context.stream().Fill(context.mem(*y), value_, y->num_elements());
  }

 private:
  float value_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateConstantOfShapeGpuKernel(const GpuKernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(const Tensor value, ParseConstantOfShapeValue(init));
  if (value.dtype() != DataType::kFloat32) return init.Unsupported("the GPU fills float32 values only");
  return MakeGpuKernel<ConstantOfShapeGpuKernel>(*value.data<float>());
}

}  // namespace traind::engine::gpu
