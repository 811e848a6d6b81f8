// GPU kernels of Gather and ScatterND (gather_scatter.cl) for float32 data. The indices are host inputs: checked
// and wrapped on the host exactly as the CPU kernels check them (an index out of range is the same error), then
// uploaded as offsets.
#include "absl/strings/str_cat.h"
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
    TRAIND_ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(axis_, data->rank()));
    const Shape& data_shape = data->shape();
    const int64_t axis_dim = data_shape[axis];
    const int64_t count = indices->num_elements();
    Shape out_shape(data_shape.begin(), data_shape.begin() + axis);
    out_shape.insert(out_shape.end(), indices->shape().begin(), indices->shape().end());
    out_shape.insert(out_shape.end(), data_shape.begin() + axis + 1, data_shape.end());
    std::vector<int64_t> rows(static_cast<size_t>(count));
    TRAIND_RETURN_IF_ERROR(DispatchIndexType(*indices, "Gather indices", [&](auto tag) -> absl::Status {
      using I = typename decltype(tag)::type;
      const I* values = indices->data<I>();
      TRAIND_RETURN_IF_ERROR(CheckIndices(values, count, axis_dim, "Gather"));
      for (int64_t i = 0; i < count; ++i) {
        const int64_t index = static_cast<int64_t>(values[i]);
        rows[i] = index < 0 ? index + axis_dim : index;
      }
      return absl::OkStatus();
    }));
    TRAIND_ASSIGN_OR_RETURN(Tensor * out, context.AllocateOutput(0, data->dtype(), out_shape));
    const int64_t n = out->num_elements();
    if (n == 0) return absl::OkStatus();
    TRAIND_ASSIGN_OR_RETURN(cl_mem device_rows, rows_.Upload(context, std::move(rows)));
    const int64_t inner = DimProduct(data_shape, axis + 1, data_shape.size());
    return kernel_.Launch1D(context, n, context.mem(*data), device_rows, context.mem(*out), n, count, axis_dim,
                            inner);
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
    const int64_t rank = data->rank();
    if (indices->rank() < 1 || indices->dim(indices->rank() - 1) < 1 || indices->dim(indices->rank() - 1) > rank) {
      return absl::InvalidArgumentError(absl::StrCat("ScatterND: indices ", indices->DebugString(),
                                                     " do not address data ", data->DebugString()));
    }
    const int64_t depth = indices->dim(indices->rank() - 1);
    Shape expected(indices->shape().begin(), indices->shape().end() - 1);
    expected.insert(expected.end(), data->shape().begin() + depth, data->shape().end());
    if (updates->shape() != expected || updates->dtype() != data->dtype()) {
      return absl::InvalidArgumentError(absl::StrCat("ScatterND: updates ", updates->DebugString(),
                                                     " must have shape ", ShapeToString(expected)));
    }
    const std::vector<int64_t> strides = RowMajorStrides(data->shape());
    const int64_t slice = DimProduct(data->shape(), depth, rank);
    const int64_t count = indices->num_elements() / depth;
    std::vector<int64_t> offsets(static_cast<size_t>(count));
    TRAIND_RETURN_IF_ERROR(DispatchIndexType(*indices, "ScatterND indices", [&](auto tag) -> absl::Status {
      using I = typename decltype(tag)::type;
      const I* values = indices->data<I>();
      for (int64_t t = 0; t < count; ++t) {
        int64_t offset = 0;
        for (int64_t j = 0; j < depth; ++j) {
          int64_t index;
          const int64_t value = static_cast<int64_t>(values[t * depth + j]);
          if (!WrapIndex(value, data->dim(j), &index)) return IndexOutOfRange("ScatterND", value, data->dim(j));
          offset += index * strides[j];
        }
        offsets[t] = offset;
      }
      return absl::OkStatus();
    }));
    TRAIND_ASSIGN_OR_RETURN(Tensor * out, context.AllocateOutput(0, data->dtype(), data->shape()));
    TRAIND_RETURN_IF_ERROR(context.stream().CopyOnDevice(context.mem(*data), context.mem(*out), data->byte_size()));
    if (count == 0 || slice == 0) return absl::OkStatus();
    TRAIND_ASSIGN_OR_RETURN(cl_mem device_offsets, offsets_.Upload(context, std::move(offsets)));
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
  TRAIND_ASSIGN_OR_RETURN(const std::string reduction, init.GetString("reduction", "none"));
  const int code = reduction == "none" ? 0 : reduction == "add" ? 1 : reduction == "mul" ? 2 : -1;
  if (code < 0) return init.Unsupported(absl::StrCat("reduction '", reduction, "'"));
  TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("gather_scatter.cl", "scatter_nd_f32"));
  return MakeGpuKernel<ScatterNdGpuKernel>(code, std::move(kernel));
}

}  // namespace traind::engine::gpu
