#include "engine/ops/gpu_util.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/runtime/op_registry.h"

namespace traind::engine::gpu {

absl::StatusOr<BroadcastLayout> MakeBroadcastLayout(const Shape& output, const std::vector<Shape>& inputs) {
  const size_t rank = output.size();
  // Per dim, innermost first: the output size and each input's stride (0 where it broadcasts).
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides(inputs.size());
  std::vector<int64_t> running(inputs.size(), 1);
  for (size_t back = 0; back < rank; ++back) {
    const int64_t dim = output[rank - 1 - back];
    if (dim == 1) continue;  // Contributes nothing to any index.
    std::vector<int64_t> column(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Shape& shape = inputs[i];
      const int64_t own = back < shape.size() ? shape[shape.size() - 1 - back] : 1;
      column[i] = own == 1 ? 0 : running[i];
      running[i] *= own;
    }
    // Merge with the previous (inner) dim when every input continues it contiguously or broadcasts in both.
    bool merge = !dims.empty();
    for (size_t i = 0; merge && i < inputs.size(); ++i) {
      const int64_t inner = strides[i].back();
      merge = (inner == 0 && column[i] == 0) || (inner != 0 && column[i] == inner * dims.back());
    }
    if (merge) {
      dims.back() *= dim;
    } else {
      dims.push_back(dim);
      for (size_t i = 0; i < inputs.size(); ++i) strides[i].push_back(column[i]);
    }
  }
  if (dims.size() > 8) {
    return absl::UnimplementedError(absl::StrCat("the GPU kernels broadcast over at most 8 dims, this needs ",
                                                 dims.size()));
  }
  BroadcastLayout layout;
  for (int lane = 0; lane < 8; ++lane) layout.dims.s[lane] = lane < static_cast<int>(dims.size()) ? dims[lane] : 1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    cl_long8 lanes;
    for (int lane = 0; lane < 8; ++lane) {
      lanes.s[lane] = lane < static_cast<int>(dims.size()) ? strides[i][lane] : 0;
    }
    layout.strides.push_back(lanes);
  }
  return layout;
}

absl::Status RequireFloat32(const GpuKernelInit& init, std::initializer_list<int> inputs) {
  for (int i : inputs) {
    if (!init.has_input(i)) continue;
    if (init.input_dtype(i) != DataType::kFloat32) {
      return init.Unsupported(absl::StrCat("the GPU kernel takes float32, input ", i, " is ",
                                           DataTypeName(init.input_dtype(i))));
    }
  }
  return absl::OkStatus();
}

namespace {

class AliasingGpuKernel final : public GpuKernel {
 public:
  explicit AliasingGpuKernel(std::unique_ptr<Kernel> cpu) : cpu_(std::move(cpu)) {}
  bool IsHostInput(int input) const override { return input > 0; }

  absl::Status Compute(GpuKernelContext& context) const override {
    std::vector<const Tensor*> inputs;
    for (int i = 0; i < context.num_inputs(); ++i) inputs.push_back(context.input(i));
    std::vector<Tensor> outputs(context.num_outputs());
    std::vector<Tensor*> output_pointers;
    for (int i = 0; i < context.num_outputs(); ++i) {
      output_pointers.push_back(context.wants_output(i) ? &outputs[i] : nullptr);
    }
    // The CPU kernel forwards its input; it allocates nothing, so an empty pool and the default threads do.
    static const std::shared_ptr<BufferPool> pool = BufferPool::Create(0);
    KernelContext cpu(inputs.data(), static_cast<int>(inputs.size()), output_pointers.data(),
                      static_cast<int>(output_pointers.size()), *pool, ThreadPool::Default());
    TRAIND_RETURN_IF_ERROR(cpu_->Compute(cpu));
    for (int i = 0; i < context.num_outputs(); ++i) {
      if (!context.wants_output(i)) continue;
      if (!outputs[i].defined() || outputs[i].buffer() != context.input(0)->buffer()) {
        return absl::InternalError("the CPU kernel did not forward its input; it cannot run on the device");
      }
      context.SetOutput(i, std::move(outputs[i]));
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Kernel> cpu_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> MakeAliasingGpuKernel(const GpuKernelInit& init) {
  const OpRegistration* registration =
      OpRegistry::Global().Find(init.node().domain(), init.op_type(), init.opset());
  if (registration == nullptr) return init.Unsupported("no CPU kernel");
  // Integer and bool values (shapes, masks) are made and read on the host: moving them is not worth it.
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0}));
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> cpu, registration->factory(init));
  return std::unique_ptr<GpuKernel>(new AliasingGpuKernel(std::move(cpu)));
}

}  // namespace traind::engine::gpu
