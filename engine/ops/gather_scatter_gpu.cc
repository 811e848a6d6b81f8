// GPU kernels of Gather and ScatterND (gather_scatter.cl) for float32 data. The indices are host inputs, checked
// by the ops' contract (gather_scatter.h, the CPU kernels' too: an index out of range is the same error), then
// uploaded as offsets.
#include "engine/ops/gather_scatter.h"
#include "engine/ops/gpu_util.h"
#include "engine/ops/index_helpers.h"

namespace traind::engine::gpu {
namespace {

// The offsets of the last run, on the device: constant indices (q, k, v = qkv[0], qkv[1], qkv[2]) are uploaded
// once, not at every run. Runs of one executor are serialised.
class DeviceOffsets {
 public:
  absl::StatusOr<cl_mem> Upload(GpuKernelContext& context, std::vector<int64_t> values) const {
    if (!device_.defined() || values != host_) {
      TRAIND_ASSIGN_OR_RETURN(Tensor host, Tensor::FromVector<int64_t>({static_cast<int64_t>(values.size())}, values));
      TRAIND_RETURN_IF_ERROR(context.stream().MakeDeviceCurrent(host).status());
      device_ = std::move(host);
      host_ = std::move(values);
    }
    return context.mem(device_);
  }

 private:
  mutable std::vector<int64_t> host_;
  mutable Tensor device_;
};

class GatherGpuKernel final : public GpuKernel {
 public:
  GatherGpuKernel(int64_t axis, ClKernel kernel) : axis_(axis), kernel_(std::move(kernel)) {}
  bool IsHostInput(int input) const override { return input == 1; }

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* data, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* indices, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const GatherShape shape, CheckGatherInputs(*data, *indices, axis_));
    std::vector<int64_t> rows(static_cast<size_t>(shape.count));
    TRAIND_RETURN_IF_ERROR(DispatchIndexType(*indices, "Gather indices", [&](auto tag) -> absl::Status {
      using I = typename decltype(tag)::type;
      const I* values = indices->data<I>();
      for (int64_t i = 0; i < shape.count; ++i) {
        const int64_t index = static_cast<int64_t>(values[i]);
        rows[i] = index < 0 ? index + shape.axis_dim : index;
      }
      return absl::OkStatus();
    }));
    TRAIND_ASSIGN_OR_RETURN(Tensor * out, context.AllocateOutput(0, data->dtype(), shape.output));
    const int64_t n = out->num_elements();
    if (n == 0) return absl::OkStatus();
    TRAIND_ASSIGN_OR_RETURN(cl_mem device_rows, rows_.Upload(context, std::move(rows)));
    return kernel_.Launch1D(context, n, context.mem(*data), device_rows, context.mem(*out), n, shape.count,
                            shape.axis_dim, shape.inner);
  }

 private:
  int64_t axis_;
  ClKernel kernel_;
  DeviceOffsets rows_;
};

class ScatterNdGpuKernel final : public GpuKernel {
 public:
  ScatterNdGpuKernel(int reduction, ClKernel kernel) : reduction_(reduction), kernel_(std::move(kernel)) {}
  bool IsHostInput(int input) const override { return input == 1; }

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* data, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* indices, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* updates, context.RequiredInput(2));
    TRAIND_ASSIGN_OR_RETURN(ScatterNdSlices slices, CheckScatterNdInputs(*data, *indices, *updates));
    const int64_t count = static_cast<int64_t>(slices.offsets.size()), slice = slices.slice_size;
    TRAIND_ASSIGN_OR_RETURN(Tensor * out, context.AllocateOutput(0, data->dtype(), data->shape()));
    TRAIND_RETURN_IF_ERROR(context.stream().CopyOnDevice(context.mem(*data), context.mem(*out), data->byte_size()));
    if (count == 0 || slice == 0) return absl::OkStatus();
    TRAIND_ASSIGN_OR_RETURN(cl_mem device_offsets, offsets_.Upload(context, std::move(slices.offsets)));
    return kernel_.Launch1D(context, slice, context.mem(*out), device_offsets, context.mem(*updates), count, slice,
                            static_cast<int32_t>(reduction_));
  }

 private:
  int reduction_;
  ClKernel kernel_;
  DeviceOffsets offsets_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateGatherGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0}));
  TRAIND_ASSIGN_OR_RETURN(const int64_t axis, init.GetInt("axis", 0));
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("gather_scatter.cl", "gather_f32"));
  return MakeGpuKernel<GatherGpuKernel>(axis, std::move(kernel));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateScatterNDGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 2}));
  TRAIND_ASSIGN_OR_RETURN(const ScatterReduction reduction, ParseScatterReduction(init));
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("gather_scatter.cl", "scatter_nd_f32"));
  return MakeGpuKernel<ScatterNdGpuKernel>(static_cast<int>(reduction), std::move(kernel));
}

}  // namespace traind::engine::gpu
