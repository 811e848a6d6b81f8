// GPU kernels of ReduceSum, ReduceMean, ReduceSumSquare, ReduceL1, ReduceL2, ReduceMax and ReduceMin (reduce_ops.cl),
// float32; their contract (attributes, axes as an attribute or, for ReduceSum from opset 13, a host input; keepdims;
// noop_with_empty_axes) is reduce_ops.h's.
#include "absl/strings/str_cat.h"
#include "engine/ops/gpu_util.h"
#include "engine/ops/reduce_ops.h"

namespace traind::engine::gpu {
namespace {

struct GroupedDims {
  cl_long8 dims;
  cl_long8 strides;
  int groups = 0;
};

class ReduceGpuKernel final : public GpuKernel {
 public:
  ReduceGpuKernel(const char* name, ReduceAttributes attributes, ClKernel per_item, ClKernel per_group)
      : name_(name),
        attributes_(std::move(attributes)),
        per_item_(std::move(per_item)),
        per_group_(std::move(per_group)) {}
  bool IsHostInput(int input) const override { return input == 1; }

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(
        std::optional<std::vector<bool>> flags,
        ReducedDims(name_, *x, attributes_.axes_from_input ? context.input(1) : nullptr, attributes_));
    if (!flags.has_value()) {  // noop_with_empty_axes
      context.SetOutput(0, *x);
      return absl::OkStatus();
    }
    const std::vector<bool>& reduce = *flags;
    const Shape& shape = x->shape();
    int64_t outputs = 1, count = 1;
    for (size_t d = 0; d < shape.size(); ++d) (reduce[d] ? count : outputs) *= shape[d];
    // Groups of adjacent dims with the same flag, innermost first, with their input strides.
    GroupedDims kept, reduced;
    for (GroupedDims* g : {&kept, &reduced}) {
      for (int lane = 0; lane < 8; ++lane) g->dims.s[lane] = 1, g->strides.s[lane] = 0;
    }
    int64_t stride = 1;
    int last = -1;  // 0 kept, 1 reduced
    for (size_t back = 0; back < shape.size(); ++back) {
      const size_t d = shape.size() - 1 - back;
      if (shape[d] == 1) continue;
      const int flag = reduce[d] ? 1 : 0;
      GroupedDims& g = flag ? reduced : kept;
      if (flag == last) {
        g.dims.s[g.groups - 1] *= shape[d];
      } else {
        if (g.groups == 8) return absl::UnimplementedError(absl::StrCat(name_, ": too many alternating axes"));
        g.dims.s[g.groups] = shape[d];
        g.strides.s[g.groups] = stride;
        ++g.groups;
      }
      last = flag;
      stride *= shape[d];
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor * y,
                            context.AllocateOutput(0, x->dtype(), ReducedShape(shape, reduce, attributes_.keepdims)));
    const size_t group = context.work_group_size();
    if (per_group_.name().empty() || outputs * 4 >= count || outputs >= 4096) {
      return per_item_.Launch1D(context, outputs, context.mem(*x), context.mem(*y), outputs, count, kept.dims,
                                kept.strides, reduced.dims, reduced.strides);
    }
    return per_group_.LaunchGroups(context, outputs, group, context.mem(*x), context.mem(*y), count, kept.dims,
                                   kept.strides, reduced.dims, reduced.strides, LocalMemory{group * sizeof(float)});
  }

 private:
  const char* name_;
  ReduceAttributes attributes_;
  ClKernel per_item_;
  ClKernel per_group_;
};

absl::StatusOr<std::unique_ptr<GpuKernel>> MakeReduce(const GpuKernelInit& init, const char* name,
                                                      const std::string& kernel, bool sum_family,
                                                      bool axes_input_since_13 = false) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0}));
  TRAIND_ASSIGN_OR_RETURN(ReduceAttributes attributes, ParseReduceAttributes(init, axes_input_since_13));
  TRAIND_ASSIGN_OR_RETURN(ClKernel per_item, init.Kernel("reduce_ops.cl", kernel));
  ClKernel per_group;
  if (sum_family) {
    TRAIND_ASSIGN_OR_RETURN(per_group, init.Kernel("reduce_ops.cl", kernel + "_group"));
  }
  return MakeGpuKernel<ReduceGpuKernel>(name, std::move(attributes), std::move(per_item), std::move(per_group));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateReduceSumGpuKernel(const GpuKernelInit& init) {
  return MakeReduce(init, "ReduceSum", "reduce_sum", true, /*axes_input_since_13=*/true);
}
absl::StatusOr<std::unique_ptr<GpuKernel>> CreateReduceMeanGpuKernel(const GpuKernelInit& init) {
  return MakeReduce(init, "ReduceMean", "reduce_mean", true);
}
absl::StatusOr<std::unique_ptr<GpuKernel>> CreateReduceSumSquareGpuKernel(const GpuKernelInit& init) {
  return MakeReduce(init, "ReduceSumSquare", "reduce_sum_square", true);
}
absl::StatusOr<std::unique_ptr<GpuKernel>> CreateReduceL1GpuKernel(const GpuKernelInit& init) {
  return MakeReduce(init, "ReduceL1", "reduce_l1", true);
}
absl::StatusOr<std::unique_ptr<GpuKernel>> CreateReduceL2GpuKernel(const GpuKernelInit& init) {
  return MakeReduce(init, "ReduceL2", "reduce_l2", true);
}
absl::StatusOr<std::unique_ptr<GpuKernel>> CreateReduceMaxGpuKernel(const GpuKernelInit& init) {
  return MakeReduce(init, "ReduceMax", "reduce_max", false);
}
absl::StatusOr<std::unique_ptr<GpuKernel>> CreateReduceMinGpuKernel(const GpuKernelInit& init) {
  return MakeReduce(init, "ReduceMin", "reduce_min", false);
}

}  // namespace traind::engine::gpu
