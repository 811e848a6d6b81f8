// GPU kernels of MatMul (numpy semantics: 1-D promotion, broadcast batch dims) and Gemm, float32, on CLBlast's GEMM
// (engine/gpu/blas.h): A's batches fold into rows when B has none, equal or one-sided batches are one strided
// batched GEMM, other broadcasts a GEMM per batch.
#include "absl/strings/str_cat.h"
#include "engine/gpu/blas.h"
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {
namespace {

int64_t Product(const Shape& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

class MatMulGpuKernel final : public GpuKernel {
 public:
  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* a, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* b, context.RequiredInput(1));
    if (a->dtype() != b->dtype()) return absl::InvalidArgumentError("MatMul: dtypes differ");
    if (a->rank() == 0 || b->rank() == 0) return absl::InvalidArgumentError("MatMul: inputs must have rank >= 1");
    Shape a_shape = a->shape();
    Shape b_shape = b->shape();
    if (a->rank() == 1) a_shape.insert(a_shape.begin(), 1);
    if (b->rank() == 1) b_shape.push_back(1);
    const int64_t m = a_shape[a_shape.size() - 2];
    const int64_t k = a_shape.back();
    const int64_t n = b_shape.back();
    if (b_shape[b_shape.size() - 2] != k) {
      return absl::InvalidArgumentError(
          absl::StrCat("MatMul: ", a->DebugString(), " x ", b->DebugString(), " inner dims differ"));
    }
    const Shape a_batch(a_shape.begin(), a_shape.end() - 2);
    const Shape b_batch(b_shape.begin(), b_shape.end() - 2);
    const Shape* batch_shapes[] = {&a_batch, &b_batch};
    TRAIND_ASSIGN_OR_RETURN(Shape out_batch, BroadcastShapes(batch_shapes));
    Shape out_shape = out_batch;
    if (a->rank() > 1) out_shape.push_back(m);
    if (b->rank() > 1) out_shape.push_back(n);
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, a->dtype(), out_shape));
    if (y->num_elements() == 0) return absl::OkStatus();
    if (k == 0) return context.stream().Fill(context.mem(*y), 0.0f, y->num_elements());

    Stream& stream = context.stream();
    const Matrix a_matrix{context.mem(*a), 0, k, false, m * k};
    const Matrix b_matrix{context.mem(*b), 0, n, false, k * n};
    const Matrix y_matrix{context.mem(*y), 0, n, false, m * n};
    const int64_t a_count = Product(a_batch), b_count = Product(b_batch), batches = Product(out_batch);
    if (b_count == 1 && a_count == batches) {
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
};

class GemmGpuKernel final : public GpuKernel {
 public:
  GemmGpuKernel(bool trans_a, bool trans_b, float alpha, float beta, ClKernel broadcast_c)
      : trans_a_(trans_a), trans_b_(trans_b), alpha_(alpha), beta_(beta), broadcast_c_(std::move(broadcast_c)) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* a, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* b, context.RequiredInput(1));
    const Tensor* c = context.input(2);
    if (a->rank() != 2 || b->rank() != 2 || a->dtype() != b->dtype() ||
        (c != nullptr && (c->dtype() != a->dtype() || c->rank() > 2))) {
      return absl::InvalidArgumentError("Gemm: A and B must be matrices, C rank <= 2, one dtype");
    }
    const int64_t m = trans_a_ ? a->dim(1) : a->dim(0);
    const int64_t k = trans_a_ ? a->dim(0) : a->dim(1);
    const int64_t n = trans_b_ ? b->dim(0) : b->dim(1);
    if ((trans_b_ ? b->dim(1) : b->dim(0)) != k) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gemm: ", a->DebugString(), " x ", b->DebugString(), " inner dims differ"));
    }
    int64_t c_rows = 1, c_cols = 1;
    if (c != nullptr && c->rank() == 2) {
      c_rows = c->dim(0);
      c_cols = c->dim(1);
    } else if (c != nullptr && c->rank() == 1) {
      c_cols = c->dim(0);
    }
    if ((c_rows != 1 && c_rows != m) || (c_cols != 1 && c_cols != n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gemm: C ", c->DebugString(), " does not broadcast to [", m, ",", n, "]"));
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, a->dtype(), {m, n}));
    if (y->num_elements() == 0) return absl::OkStatus();
    const bool use_c = c != nullptr && beta_ != 0.0f && c->num_elements() > 0;
    if (use_c) {
      TRAIND_RETURN_IF_ERROR(broadcast_c_.Launch1D(context, m * n, context.mem(*c), context.mem(*y), m, n, c_rows,
                                                   c_cols, beta_));
    }
    if (k == 0) {
      return use_c ? absl::OkStatus() : context.stream().Fill(context.mem(*y), 0.0f, m * n);
    }
    return Gemm(context.stream(), m, n, k, alpha_, Matrix{context.mem(*a), 0, a->dim(1), trans_a_, 0},
                Matrix{context.mem(*b), 0, b->dim(1), trans_b_, 0}, use_c ? 1.0f : 0.0f,
                Matrix{context.mem(*y), 0, n, false, 0});
  }

 private:
  bool trans_a_;
  bool trans_b_;
  float alpha_;
  float beta_;
  ClKernel broadcast_c_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateMatMulGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1}));
  return MakeGpuKernel<MatMulGpuKernel>();
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateGemmGpuKernel(const GpuKernelInit& init) {
  if (init.opset() < 7) return init.Unsupported("Gemm-6's broadcast attribute");
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1, 2}));
  TRAIND_ASSIGN_OR_RETURN(const int64_t trans_a, init.GetInt("transA", 0));
  TRAIND_ASSIGN_OR_RETURN(const int64_t trans_b, init.GetInt("transB", 0));
  TRAIND_ASSIGN_OR_RETURN(const float alpha, init.GetFloat("alpha", 1.0f));
  TRAIND_ASSIGN_OR_RETURN(const float beta, init.GetFloat("beta", 1.0f));
  TRAIND_ASSIGN_OR_RETURN(ClKernel broadcast_c, init.Kernel("matmul.cl", "gemm_broadcast_c"));
  return MakeGpuKernel<GemmGpuKernel>(trans_a != 0, trans_b != 0, alpha, beta, std::move(broadcast_c));
}

}  // namespace traind::engine::gpu
