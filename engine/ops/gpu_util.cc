#include "engine/ops/gpu_util.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/core/buffer_pool.h"
#include "engine/core/thread_pool.h"
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

namespace traind::engine::gpu {
namespace {

class IndexMapGpuKernel final : public GpuKernel {
 public:
  IndexMapGpuKernel(std::unique_ptr<Kernel> cpu, ClKernel gather, int fill_input)
      : cpu_(std::move(cpu)), gather_(std::move(gather)), fill_input_(fill_input) {}
  bool IsHostInput(int input) const override { return input > 0; }

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    if (x->num_elements() > (int64_t{1} << 31) - 1) {
      return absl::UnimplementedError("the GPU moves tensors of up to 2^31 elements");
    }
    // The key of a map: the input shape and the bytes of every host input.
    std::string key = ShapeToString(x->shape());
    for (int i = 1; i < context.num_inputs(); ++i) {
      const Tensor* input = context.input(i);
      absl::StrAppend(&key, "|");
      if (input != nullptr) {
        key.append(static_cast<const char*>(input->raw_data()), input->byte_size());
        absl::StrAppend(&key, ShapeToString(input->shape()), static_cast<int>(input->dtype()));
      }
    }
    float fill = 0.0f;
    if (fill_input_ >= 0 && context.input(fill_input_) != nullptr) {
      const Tensor& value = *context.input(fill_input_);
      if (value.dtype() != DataType::kFloat32 || value.num_elements() != 1) {
        return absl::InvalidArgumentError("the constant value must be a float32 scalar");
      }
      fill = *value.data<float>();
    }
    const Map* map = nullptr;
    for (const Map& cached : maps_) {
      if (cached.key == key) map = &cached;
    }
    if (map == nullptr) {
      TRAIND_ASSIGN_OR_RETURN(Map traced, Trace(context, *x));
      traced.key = std::move(key);
      if (maps_.size() == 4) maps_.erase(maps_.begin());
      maps_.push_back(std::move(traced));
      map = &maps_.back();
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), map->output_shape));
    const int64_t n = y->num_elements();
    return gather_.Launch1D(context, n, context.mem(*x), context.stream().MemOf(map->device), context.mem(*y), n,
                            fill);
  }

 private:
  struct Map {
    std::string key;
    Shape output_shape;
    Tensor device;  // int32 source index per output element, on the device
  };

  // Runs the CPU kernel on int64 element indices (the fill input as -1) and uploads the narrowed result.
  absl::StatusOr<Map> Trace(GpuKernelContext& context, const Tensor& x) const {
    TRAIND_ASSIGN_OR_RETURN(Tensor indices, Tensor::Allocate(DataType::kInt64, x.shape()));
    for (int64_t i = 0; i < indices.num_elements(); ++i) indices.mutable_data<int64_t>()[i] = i;
    TRAIND_ASSIGN_OR_RETURN(Tensor sentinel, Tensor::FromVector<int64_t>({}, {-1}));
    // The fill input is given even where the node omits it (it then defaults to 0 on the CPU and on the device).
    std::vector<const Tensor*> inputs = {&indices};
    for (int i = 1; i < std::max(context.num_inputs(), fill_input_ + 1); ++i) {
      inputs.push_back(i == fill_input_ ? &sentinel : context.input(i));
    }
    Tensor traced;
    Tensor* outputs[] = {&traced};
    static const std::shared_ptr<BufferPool> pool = BufferPool::Create(0);
    KernelContext cpu(inputs.data(), static_cast<int>(inputs.size()), outputs, 1, *pool, ThreadPool::Default());
    TRAIND_RETURN_IF_ERROR(cpu_->Compute(cpu));
    if (!traced.defined() || traced.dtype() != DataType::kInt64) {
      return absl::InternalError("the CPU kernel gave no index map");
    }
    Map map;
    map.output_shape = traced.shape();
    TRAIND_ASSIGN_OR_RETURN(Tensor narrowed, Tensor::Allocate(DataType::kInt32, traced.shape()));
    for (int64_t i = 0; i < traced.num_elements(); ++i) {
      narrowed.mutable_data<int32_t>()[i] = static_cast<int32_t>(traced.data<int64_t>()[i]);
    }
    TRAIND_RETURN_IF_ERROR(context.stream().MakeDeviceCurrent(narrowed).status());
    map.device = std::move(narrowed);
    return map;
  }

  std::unique_ptr<Kernel> cpu_;
  ClKernel gather_;
  int fill_input_;
  // A node sees one input shape in practice; a few are kept for models with changing shapes. Runs of one executor
  // are serialised, so the cache needs no lock.
  mutable std::vector<Map> maps_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> MakeIndexMapGpuKernel(const GpuKernelInit& init, int fill_input) {
  const OpRegistration* registration =
      OpRegistry::Global().Find(init.node().domain(), init.op_type(), init.opset());
  if (registration == nullptr) return init.Unsupported("no CPU kernel");
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0}));
  if (fill_input >= 0) TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {fill_input}));
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> cpu, registration->factory(init));
  TRAIND_ASSIGN_OR_RETURN(ClKernel gather, init.Kernel("data_movement.cl", "gather_by_map"));
  return std::unique_ptr<GpuKernel>(new IndexMapGpuKernel(std::move(cpu), std::move(gather), fill_input));
}

}  // namespace traind::engine::gpu

#include "engine/ops/gpu_pool.h"

namespace traind::engine::gpu {

absl::StatusOr<PoolWindow> MakePoolWindow(const char* op, const WindowGeometry& geometry, Shape output_shape) {
  if (geometry.rank() < 1 || geometry.rank() > 2) {
    return absl::UnimplementedError(
        absl::StrCat(op, ": the GPU kernel takes 1 or 2 spatial dims, not ", geometry.rank()));
  }
  PoolWindow window;
  window.output_shape = std::move(output_shape);
  const size_t w = geometry.rank() - 1;  // the last spatial dim; a 2-D window also has w - 1
  window.width = geometry.input[w];
  window.out_width = geometry.output[w];
  window.kernel_w = geometry.kernel[w];
  window.stride_w = geometry.strides[w];
  window.dilation_w = geometry.dilations[w];
  window.pad_w = geometry.pad_begin[w];
  window.pad_end_w = geometry.pad_end[w];
  if (geometry.rank() == 2) {
    window.height = geometry.input[0];
    window.out_height = geometry.output[0];
    window.kernel_h = geometry.kernel[0];
    window.stride_h = geometry.strides[0];
    window.dilation_h = geometry.dilations[0];
    window.pad_h = geometry.pad_begin[0];
    window.pad_end_h = geometry.pad_end[0];
  }
  return window;
}

}  // namespace traind::engine::gpu
