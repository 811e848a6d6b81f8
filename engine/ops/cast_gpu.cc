// GPU kernels of Cast and CastLike between float32 and bool (cast.cl); a cast to the same dtype forwards its input.
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {
namespace {

class CastGpuKernel final : public GpuKernel {
 public:
  CastGpuKernel(DataType to, ClKernel kernel) : to_(to), kernel_(std::move(kernel)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    if (x->dtype() == to_) {
      context.SetOutput(0, *x);
      return absl::OkStatus();
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, to_, x->shape()));
    const int64_t n = x->num_elements();
    return kernel_.Launch1D(context, n, context.mem(*x), context.mem(*y), n);
  }

 private:
  DataType to_;
  ClKernel kernel_;
};

bool FloatOrBool(DataType dtype) { return dtype == DataType::kFloat32 || dtype == DataType::kBool; }

absl::StatusOr<std::unique_ptr<GpuKernel>> MakeCast(const GpuKernelInit& init, DataType to) {
  const DataType from = init.input_dtype(0);
  if (!FloatOrBool(from) || !FloatOrBool(to)) return init.Unsupported("the GPU casts between float32 and bool only");
  ClKernel kernel;
  if (from != to) {
    TRAIND_ASSIGN_OR_RETURN(kernel, init.Kernel("cast.cl", from == DataType::kBool ? "bool_to_f32" : "f32_to_bool"));
  }
  return MakeGpuKernel<CastGpuKernel>(to, std::move(kernel));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateCastGpuKernel(const GpuKernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(const int64_t to, init.GetInt("to", std::nullopt));
  return MakeCast(init, static_cast<DataType>(to));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateCastLikeGpuKernel(const GpuKernelInit& init) {
  return MakeCast(init, init.input_dtype(1));
}

}  // namespace traind::engine::gpu
