// GPU kernel of Conv (conv_ops.cl + CLBlast), float32, 1 or 2 spatial dims, any group: for each chunk of images,
// im2col (skipped for pointwise convolutions) and one strided batched GEMM per group, then the bias. Its contract is
// conv_ops.h's.
#include "engine/gpu/blas.h"
#include "engine/ops/gpu_conv.h"

namespace traind::engine::gpu {
namespace {

class ConvGpuKernel final : public GpuKernel {
 public:
  ConvGpuKernel(SpatialAttributes attributes, int64_t group, ClKernel im2col, ClKernel bias)
      : attributes_(std::move(attributes)), group_(group), im2col_(std::move(im2col)), bias_(std::move(bias)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* w, context.RequiredInput(1));
    const Tensor* b = context.input(2);
    TRAIND_ASSIGN_OR_RETURN(ConvShape shape, CheckConvInputs(*x, *w, b, attributes_, group_));
    TRAIND_ASSIGN_OR_RETURN(const ConvGeometry g, MakeConvGeometry("Conv", std::move(shape), x->dim(0), group_));
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), g.window.output_shape));
    const int64_t total = y->num_elements();
    if (total == 0) return absl::OkStatus();
    Stream& stream = context.stream();
    if (w->num_elements() == 0) {
      TRAIND_RETURN_IF_ERROR(stream.Fill(context.mem(*y), 0.0f, total));
    } else {
      DeviceMemory col;
      if (!g.pointwise) {
        TRAIND_ASSIGN_OR_RETURN(col, context.Scratch(static_cast<size_t>(g.chunk * g.rows * g.positions) *
                                                     sizeof(float)));
      }
      for (int64_t first = 0; first < g.images; first += g.chunk) {
        const int64_t count = std::min(g.chunk, g.images - first);
        Matrix columns;
        if (g.pointwise) {
          columns = Matrix{context.mem(*x), first * g.rows * g.positions, g.positions, false, g.rows * g.positions};
        } else {
          const int64_t n = count * g.rows * g.positions;
          TRAIND_RETURN_IF_ERROR(
              g.window.Launch(im2col_, context, n, context.mem(*x), col.mem(), n, g.channels, first));
          columns = Matrix{col.mem(), 0, g.positions, false, g.rows * g.positions};
        }
        for (int64_t group = 0; group < g.group; ++group) {
          const Matrix weights{context.mem(*w), group * g.group_out_channels * g.group_rows(), g.group_rows(), false,
                               0};
          Matrix group_columns = columns;
          group_columns.offset += group * g.group_rows() * g.positions;
          const Matrix output{context.mem(*y), (first * g.out_channels + group * g.group_out_channels) * g.positions,
                              g.positions, false, g.out_channels * g.positions};
          TRAIND_RETURN_IF_ERROR(GemmStridedBatched(stream, g.group_out_channels, g.positions, g.group_rows(), 1.0f,
                                                    weights, group_columns, 0.0f, output, count));
        }
      }
    }
    if (b == nullptr) return absl::OkStatus();
    return bias_.Launch1D(context, total, context.mem(*y), context.mem(*b), total, g.out_channels, g.positions);
  }

 private:
  SpatialAttributes attributes_;
  int64_t group_;
  ClKernel im2col_;
  ClKernel bias_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateConvGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1, 2}));
  TRAIND_ASSIGN_OR_RETURN(SpatialAttributes attributes, SpatialAttributes::Parse(init, /*allow_dilations=*/true));
  if (attributes.kernel_shape.size() > 2) return init.Unsupported("3 spatial dims");
  TRAIND_ASSIGN_OR_RETURN(const int64_t group, ParseConvGroup(init));
  TRAIND_ASSIGN_OR_RETURN(ClKernel im2col, init.Kernel("conv_ops.cl", "im2col_f32"));
  TRAIND_ASSIGN_OR_RETURN(ClKernel bias, init.Kernel("conv_ops.cl", "add_channel_bias_f32"));
  return MakeGpuKernel<ConvGpuKernel>(std::move(attributes), group, std::move(im2col), std::move(bias));
}

}  // namespace traind::engine::gpu
