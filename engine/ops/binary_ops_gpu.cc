// GPU kernels of the broadcasting binary ops (binary_ops.cl), variadic Min/Max/Sum/Mean folded pairwise as on the
// CPU; float32 only.
#include "absl/strings/str_cat.h"
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {

// a (op) b into `output`, whose shape is their broadcast (checked by the caller); `output` may be `a` itself.
absl::Status LaunchBinary(GpuKernelContext& context, const ClKernel& same, const ClKernel& broadcast, const Tensor& a,
                          const Tensor& b, const Tensor& output) {
  const int64_t n = output.num_elements();
  if (a.shape() == output.shape() && b.shape() == output.shape()) {
    return same.Launch1D(context, n, context.mem(a), context.mem(b), context.mem(output), n);
  }
  TRAIND_ASSIGN_OR_RETURN(BroadcastLayout layout, MakeBroadcastLayout(output.shape(), {a.shape(), b.shape()}));
  return broadcast.Launch1D(context, n, context.mem(a), context.mem(b), context.mem(output), n, layout.dims,
                            layout.strides[0], layout.strides[1]);
}

namespace {

class BinaryGpuKernel final : public GpuKernel {
 public:
  BinaryGpuKernel(const char* name, ClKernel same, ClKernel broadcast, DataType output_dtype)
      : name_(name), same_(std::move(same)), broadcast_(std::move(broadcast)), output_dtype_(output_dtype) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* a, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* b, context.RequiredInput(1));
    const Shape* shapes[] = {&a->shape(), &b->shape()};
    absl::StatusOr<Shape> shape = BroadcastShapes(shapes);
    if (!shape.ok()) return absl::Status(shape.status().code(), absl::StrCat(name_, ": ", shape.status().message()));
    TRAIND_ASSIGN_OR_RETURN(Tensor * output, context.AllocateOutput(0, output_dtype_, std::move(*shape)));
    return LaunchBinary(context, same_, broadcast_, *a, *b, *output);
  }

 private:
  const char* name_;
  ClKernel same_;
  ClKernel broadcast_;
  DataType output_dtype_;
};

// Min, Max, Sum, Mean of any number of inputs: pairwise into the output, then Mean scales.
class VariadicGpuKernel final : public GpuKernel {
 public:
  VariadicGpuKernel(ClKernel same, ClKernel broadcast, ClKernel scale, bool mean)
      : same_(std::move(same)), broadcast_(std::move(broadcast)), scale_(std::move(scale)), mean_(mean) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* first, context.RequiredInput(0));
    std::vector<const Shape*> shapes;
    for (int i = 0; i < context.num_inputs(); ++i) {
      TRAIND_ASSIGN_OR_RETURN(const Tensor* input, context.RequiredInput(i));
      shapes.push_back(&input->shape());
    }
    TRAIND_ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(shapes));
    if (context.num_inputs() == 1) {  // Of one tensor: itself (aliased), as on the CPU.
      context.SetOutput(0, *first);
      return absl::OkStatus();
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor * output, context.AllocateOutput(0, DataType::kFloat32, shape));
    const Tensor* accumulated = first;
    for (int i = 1; i < context.num_inputs(); ++i) {
      TRAIND_RETURN_IF_ERROR(LaunchBinary(context, same_, broadcast_, *accumulated, *context.input(i), *output));
      accumulated = output;
    }
    if (mean_) {
      const int64_t n = output->num_elements();
      TRAIND_RETURN_IF_ERROR(scale_.Launch1D(context, n, context.mem(*output), context.mem(*output), n,
                                             static_cast<float>(context.num_inputs())));
    }
    return absl::OkStatus();
  }

 private:
  ClKernel same_;
  ClKernel broadcast_;
  ClKernel scale_;
  bool mean_;
};

absl::StatusOr<std::unique_ptr<GpuKernel>> MakeBinary(const GpuKernelInit& init, const char* name,
                                                      DataType output_dtype = DataType::kFloat32) {
  if (init.opset() < 7) return init.Unsupported("legacy broadcasting (opset < 7)");
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1}));
  TRAIND_ASSIGN_OR_RETURN(ClKernel same, init.Kernel("binary_ops.cl", absl::StrCat(name, "_same")));
  TRAIND_ASSIGN_OR_RETURN(ClKernel broadcast, init.Kernel("binary_ops.cl", name));
  return MakeGpuKernel<BinaryGpuKernel>(name, std::move(same), std::move(broadcast), output_dtype);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> MakeVariadicGpuKernel(const GpuKernelInit& init, const char* name,
                                                                 bool mean) {
  for (int i = 0; i < init.num_inputs(); ++i) TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {i}));
  TRAIND_ASSIGN_OR_RETURN(ClKernel same, init.Kernel("binary_ops.cl", absl::StrCat(name, "_same")));
  TRAIND_ASSIGN_OR_RETURN(ClKernel broadcast, init.Kernel("binary_ops.cl", name));
  ClKernel scale;
  if (mean) {
    TRAIND_ASSIGN_OR_RETURN(scale, init.Kernel("binary_ops.cl", "divide_f32"));
  }
  return MakeGpuKernel<VariadicGpuKernel>(std::move(same), std::move(broadcast), std::move(scale), mean);
}

#define TRAIND_DEFINE_BINARY_GPU(OpName, kernel_name, dtype)                                        \
  absl::StatusOr<std::unique_ptr<GpuKernel>> Create##OpName##GpuKernel(const GpuKernelInit& init) { \
    return MakeBinary(init, kernel_name, dtype);                                                    \
  }
TRAIND_DEFINE_BINARY_GPU(Add, "add_f32", DataType::kFloat32)
TRAIND_DEFINE_BINARY_GPU(Sub, "sub_f32", DataType::kFloat32)
TRAIND_DEFINE_BINARY_GPU(Mul, "mul_f32", DataType::kFloat32)
TRAIND_DEFINE_BINARY_GPU(Div, "div_f32", DataType::kFloat32)
TRAIND_DEFINE_BINARY_GPU(Equal, "equal_f32", DataType::kBool)
TRAIND_DEFINE_BINARY_GPU(Less, "less_f32", DataType::kBool)
TRAIND_DEFINE_BINARY_GPU(Greater, "greater_f32", DataType::kBool)
TRAIND_DEFINE_BINARY_GPU(LessOrEqual, "less_or_equal_f32", DataType::kBool)
TRAIND_DEFINE_BINARY_GPU(GreaterOrEqual, "greater_or_equal_f32", DataType::kBool)
#undef TRAIND_DEFINE_BINARY_GPU

absl::StatusOr<std::unique_ptr<GpuKernel>> CreatePowGpuKernel(const GpuKernelInit& init) {
  return MakeBinary(init, "pow_f32");
}
absl::StatusOr<std::unique_ptr<GpuKernel>> CreateMinGpuKernel(const GpuKernelInit& init) {
  return MakeVariadicGpuKernel(init, "min_f32", false);
}
absl::StatusOr<std::unique_ptr<GpuKernel>> CreateMaxGpuKernel(const GpuKernelInit& init) {
  return MakeVariadicGpuKernel(init, "max_f32", false);
}

}  // namespace traind::engine::gpu
