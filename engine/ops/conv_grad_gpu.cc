// GPU kernel of ConvGrad (conv_grad.cl, conv_ops.cl's im2col, CLBlast), float32, 1 or 2 spatial dims, any group; each
// output only when the graph uses it. Its contract is conv_ops.h's.
#include "engine/gpu/blas.h"
#include "engine/ops/gpu_conv.h"

namespace traind::engine::gpu {
namespace {

class ConvGradGpuKernel final : public GpuKernel {
 public:
  ConvGradGpuKernel(SpatialAttributes attributes, int64_t group, ClKernel im2col, ClKernel col2im,
                    ClKernel channel_sum, ClKernel sum_batches)
      : attributes_(std::move(attributes)),
        group_(group),
        im2col_(std::move(im2col)),
        col2im_(std::move(col2im)),
        channel_sum_(std::move(channel_sum)),
        sum_batches_(std::move(sum_batches)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* dy, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* w, context.RequiredInput(2));
    TRAIND_ASSIGN_OR_RETURN(ConvShape shape, CheckConvGradInputs(*dy, *x, *w, attributes_, group_));
    TRAIND_ASSIGN_OR_RETURN(const ConvGeometry g, MakeConvGeometry("ConvGrad", std::move(shape), x->dim(0), group_));
    Stream& stream = context.stream();
    const bool wants_dx = context.wants_output(0), wants_dw = context.wants_output(1);
    if (context.wants_output(2)) {
      TRAIND_ASSIGN_OR_RETURN(Tensor * db, context.AllocateOutput(2, x->dtype(), {g.out_channels}));
      const size_t size = context.work_group_size();
      TRAIND_RETURN_IF_ERROR(channel_sum_.LaunchGroups(context, g.out_channels, size, context.mem(*dy),
                                                       context.mem(*db), g.images, g.out_channels, g.positions,
                                                       LocalMemory{size * sizeof(float)}));
    }
    Tensor* dx = nullptr;
    Tensor* dw = nullptr;
    if (wants_dx) {
      TRAIND_ASSIGN_OR_RETURN(dx, context.AllocateOutput(0, x->dtype(), x->shape()));
    }
    if (wants_dw) {
      TRAIND_ASSIGN_OR_RETURN(dw, context.AllocateOutput(1, w->dtype(), w->shape()));
    }
    if (!wants_dx && !wants_dw) return absl::OkStatus();
    if (g.images == 0 || g.positions == 0 || w->num_elements() == 0) {
      if (dx != nullptr) TRAIND_RETURN_IF_ERROR(stream.Fill(context.mem(*dx), 0.0f, dx->num_elements()));
      if (dw != nullptr) TRAIND_RETURN_IF_ERROR(stream.Fill(context.mem(*dw), 0.0f, dw->num_elements()));
      return absl::OkStatus();
    }
    const int64_t image_columns = g.rows * g.positions;
    const int64_t group_weights = g.group_out_channels * g.group_rows();
    TRAIND_ASSIGN_OR_RETURN(DeviceMemory col, context.Scratch(static_cast<size_t>(g.chunk * image_columns) *
                                                              sizeof(float)));
    DeviceMemory partial;
    if (wants_dw) {
      TRAIND_ASSIGN_OR_RETURN(partial, context.Scratch(static_cast<size_t>(g.chunk * group_weights) * sizeof(float)));
    }
    for (int64_t first = 0; first < g.images; first += g.chunk) {
      const int64_t count = std::min(g.chunk, g.images - first);
      const int64_t dy_offset = first * g.out_channels * g.positions;
      if (wants_dw) {
        // dW_g = sum over the chunk's images of dY_n,g [Mg, P] x col_n,g^T [P, Cg*taps].
        Matrix columns;
        if (g.pointwise) {
          columns = Matrix{context.mem(*x), first * image_columns, g.positions, true, image_columns};
        } else {
          const int64_t n = count * image_columns;
          TRAIND_RETURN_IF_ERROR(
              g.window.Launch(im2col_, context, n, context.mem(*x), col.mem(), n, g.channels, first));
          columns = Matrix{col.mem(), 0, g.positions, true, image_columns};
        }
        for (int64_t group = 0; group < g.group; ++group) {
          const Matrix gradient{context.mem(*dy), dy_offset + group * g.group_out_channels * g.positions,
                                g.positions, false, g.out_channels * g.positions};
          Matrix group_columns = columns;
          group_columns.offset += group * g.group_rows() * g.positions;
          TRAIND_RETURN_IF_ERROR(GemmStridedBatched(stream, g.group_out_channels, g.group_rows(), g.positions, 1.0f,
                                                    gradient, group_columns, 0.0f,
                                                    Matrix{partial.mem(), 0, g.group_rows(), false, group_weights},
                                                    count));
          TRAIND_RETURN_IF_ERROR(sum_batches_.Launch1D(context, group_weights, partial.mem(), context.mem(*dw),
                                                       group * group_weights, group_weights, count,
                                                       static_cast<int32_t>(first > 0)));
        }
      }
      if (wants_dx) {
        // dcol_n,g [Cg*taps, P] = W_g^T x dY_n,g, then col2im into dX.
        for (int64_t group = 0; group < g.group; ++group) {
          const Matrix weights{context.mem(*w), group * group_weights, g.group_rows(), true, 0};
          const Matrix gradient{context.mem(*dy), dy_offset + group * g.group_out_channels * g.positions,
                                g.positions, false, g.out_channels * g.positions};
          const Matrix columns{col.mem(), group * g.group_rows() * g.positions, g.positions, false, image_columns};
          TRAIND_RETURN_IF_ERROR(GemmStridedBatched(stream, g.group_rows(), g.positions, g.group_out_channels, 1.0f,
                                                    weights, gradient, 0.0f, columns, count));
        }
        const int64_t n = count * g.channels * g.window.height * g.window.width;
        TRAIND_RETURN_IF_ERROR(g.window.Launch(col2im_, context, n, col.mem(), context.mem(*dx), n, g.channels,
                                               first));
      }
    }
    return absl::OkStatus();
  }

 private:
  SpatialAttributes attributes_;
  int64_t group_;
  ClKernel im2col_;
  ClKernel col2im_;
  ClKernel channel_sum_;
  ClKernel sum_batches_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateConvGradGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1, 2}));
  TRAIND_ASSIGN_OR_RETURN(SpatialAttributes attributes, SpatialAttributes::Parse(init, /*allow_dilations=*/true));
  if (attributes.kernel_shape.size() > 2) return init.Unsupported("3 spatial dims");
  TRAIND_ASSIGN_OR_RETURN(const int64_t channels_last, init.GetInt("channels_last", 0));
  if (channels_last != 0) return init.Unsupported("channels-last activations (CPU plans only)");
  TRAIND_ASSIGN_OR_RETURN(const int64_t group, ParseConvGroup(init));
  TRAIND_ASSIGN_OR_RETURN(ClKernel im2col, init.Kernel("conv_ops.cl", "im2col_f32"));
  TRAIND_ASSIGN_OR_RETURN(ClKernel col2im, init.Kernel("conv_grad.cl", "col2im_f32"));
  TRAIND_ASSIGN_OR_RETURN(ClKernel channel_sum, init.Kernel("conv_grad.cl", "channel_sum_f32"));
  TRAIND_ASSIGN_OR_RETURN(ClKernel sum_batches, init.Kernel("conv_grad.cl", "sum_batches_f32"));
  return MakeGpuKernel<ConvGradGpuKernel>(std::move(attributes), group, std::move(im2col), std::move(col2im),
                                          std::move(channel_sum), std::move(sum_batches));
}

}  // namespace traind::engine::gpu
