// GPU kernels of MatMul (numpy semantics: 1-D promotion, broadcast batch dims) and Gemm, float32, on CLBlast's GEMM
// (engine/gpu/blas.h): A's batches fold into rows when B has none, equal or one-sided batches are one strided
// batched GEMM, other broadcasts a GEMM per batch. Their contract is matmul.h's.
#include "engine/gpu/blas.h"
#include "engine/ops/gpu_util.h"
#include "engine/ops/matmul.h"

namespace traind::engine::gpu {
namespace {

int64_t Product(const Shape& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

// MatMul, and FusedMatMul when `fused` (operands read transposed in place).
class MatMulGpuKernel final : public GpuKernel {
 public:
  MatMulGpuKernel() = default;
  explicit MatMulGpuKernel(MatMulTransposes transposes) : fused_(true), transposes_(transposes) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* a, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* b, context.RequiredInput(1));
    // Only CPU plans fold a bias Add into the product (engine/runtime/bias_folding.h).
    if (fused_ && context.input(2) != nullptr) {
      return absl::UnimplementedError("FusedMatMul with a bias input runs on the CPU executor only");
    }
    TRAIND_ASSIGN_OR_RETURN(const MatMulShapes shapes,
                            fused_ ? CheckFusedMatMulInputs(*a, *b, transposes_) : CheckMatMulInputs(*a, *b));
    const int64_t m = shapes.m, n = shapes.n, k = shapes.k;
    const Shape& a_batch = shapes.a_batch;
    const Shape& b_batch = shapes.b_batch;
    const Shape& out_batch = shapes.batch;
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, a->dtype(), shapes.output));
    if (y->num_elements() == 0) return absl::OkStatus();
    if (k == 0) return context.stream().Fill(context.mem(*y), 0.0f, y->num_elements());

    Stream& stream = context.stream();
    const bool ta = transposes_.a, tb = transposes_.b;
    const Matrix a_matrix{context.mem(*a), 0, ta ? m : k, ta, m * k};
    const Matrix b_matrix{context.mem(*b), 0, tb ? k : n, tb, k * n};
    const Matrix y_matrix{context.mem(*y), 0, n, false, m * n};
    const int64_t a_count = Product(a_batch), b_count = Product(b_batch), batches = Product(out_batch);
    if (b_count == 1 && a_count == batches && !ta) {
      // B without (or with one) batch: A's batches and rows are one tall matrix.
      return Gemm(stream, a_count * m, n, k, 1.0f, a_matrix, b_matrix, 0.0f, y_matrix);
    }
    if ((a_count == batches || a_count == 1) && (b_count == batches || b_count == 1)) {
      Matrix a_strided = a_matrix, b_strided = b_matrix;
      if (a_count == 1) a_strided.stride = 0;
      if (b_count == 1) b_strided.stride = 0;
      return GemmStridedBatched(stream, m, n, k, 1.0f, a_strided, b_strided, 0.0f, y_matrix, batches);
    }
    // Both broadcast along different batch dims: one GEMM per output batch.
    TRAIND_ASSIGN_OR_RETURN(BroadcastLayout layout, MakeBroadcastLayout(out_batch, {a_batch, b_batch}));
    for (int64_t batch = 0; batch < batches; ++batch) {
      int64_t a_index = 0, b_index = 0, rem = batch;
      for (int lane = 0; lane < 8; ++lane) {
        const int64_t c = rem % layout.dims.s[lane];
        rem /= layout.dims.s[lane];
        a_index += c * layout.strides[0].s[lane];
        b_index += c * layout.strides[1].s[lane];
      }
      Matrix a_one = a_matrix, b_one = b_matrix, y_one = y_matrix;
      a_one.offset = a_index * m * k;
      b_one.offset = b_index * k * n;
      y_one.offset = batch * m * n;
      TRAIND_RETURN_IF_ERROR(Gemm(stream, m, n, k, 1.0f, a_one, b_one, 0.0f, y_one));
    }
    return absl::OkStatus();
  }

 private:
  bool fused_ = false;
  MatMulTransposes transposes_;
};

class GemmGpuKernel final : public GpuKernel {
 public:
  GemmGpuKernel(GemmAttributes attributes, ClKernel broadcast_c)
      : attributes_(attributes), broadcast_c_(std::move(broadcast_c)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* a, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* b, context.RequiredInput(1));
    const Tensor* c = context.input(2);
    TRAIND_ASSIGN_OR_RETURN(const GemmShapes shapes, CheckGemmInputs(*a, *b, c, attributes_));
    const int64_t m = shapes.m, n = shapes.n, k = shapes.k;
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, a->dtype(), {m, n}));
    if (y->num_elements() == 0) return absl::OkStatus();
    const bool use_c = c != nullptr && attributes_.beta != 0.0f && c->num_elements() > 0;
    if (use_c) {
      TRAIND_RETURN_IF_ERROR(broadcast_c_.Launch1D(context, m * n, context.mem(*c), context.mem(*y), m, n,
                                                   shapes.c_rows, shapes.c_cols, attributes_.beta));
    }
    if (k == 0) {
      return use_c ? absl::OkStatus() : context.stream().Fill(context.mem(*y), 0.0f, m * n);
    }
    return Gemm(context.stream(), m, n, k, attributes_.alpha,
                Matrix{context.mem(*a), 0, a->dim(1), attributes_.trans_a, 0},
                Matrix{context.mem(*b), 0, b->dim(1), attributes_.trans_b, 0}, use_c ? 1.0f : 0.0f,
                Matrix{context.mem(*y), 0, n, false, 0});
  }

 private:
  GemmAttributes attributes_;
  ClKernel broadcast_c_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateMatMulGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1}));
  return MakeGpuKernel<MatMulGpuKernel>();
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateFusedMatMulGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1}));
  TRAIND_ASSIGN_OR_RETURN(const MatMulTransposes transposes, ParseFusedMatMulAttributes(init));
  return MakeGpuKernel<MatMulGpuKernel>(transposes);
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateGemmGpuKernel(const GpuKernelInit& init) {
  if (init.opset() < 7) return init.Unsupported("Gemm-6's broadcast attribute");
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1, 2}));
  TRAIND_ASSIGN_OR_RETURN(const GemmAttributes attributes, ParseGemmAttributes(init));
  TRAIND_ASSIGN_OR_RETURN(ClKernel broadcast_c, init.Kernel("matmul.cl", "gemm_broadcast_c"));
  return MakeGpuKernel<GemmGpuKernel>(attributes, std::move(broadcast_c));
}

}  // namespace traind::engine::gpu
