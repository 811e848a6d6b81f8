// GPU kernels of ScaledDotProductAttention and its gradient (attention_ops.h's contract), float32: CLBlast's strided
// batched GEMMs (engine/gpu/blas.h) for the products, softmax_ops.cl's rows and attention_ops.cl's softmax gradient
// between them. The CPU kernels keep each head's scores in the cache; here they are one [.., Lq, Lk] buffer.
#include "engine/gpu/blas.h"
#include "engine/ops/attention_ops.h"
#include "engine/ops/gpu_util.h"

namespace traind::engine::gpu {
namespace {

// C = alpha * op(A) op(B) for `batches` products of m x k by k x n; zeros where k is 0 (CLBlast wants k >= 1).
absl::Status BatchedProduct(GpuKernelContext& context, int64_t batches, int64_t m, int64_t n, int64_t k, float alpha,
                            const Matrix& a, const Matrix& b, const Matrix& c) {
  if (batches == 0 || m == 0 || n == 0) return absl::OkStatus();
  if (k == 0) return context.stream().Fill(c.mem, 0.0f, batches * m * n);
  return GemmStridedBatched(context.stream(), m, n, k, alpha, a, b, 0.0f, c, batches);
}

Shape WithMatrix(const Shape& batch, int64_t rows, int64_t cols) {
  Shape shape = batch;
  shape.push_back(rows);
  shape.push_back(cols);
  return shape;
}

class ScaledDotProductAttentionGpuKernel final : public GpuKernel {
 public:
  ScaledDotProductAttentionGpuKernel(ClKernel softmax, AttentionAttributes attributes)
      : softmax_(std::move(softmax)), attributes_(attributes) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* q, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* b, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* v, context.RequiredInput(2));
    TRAIND_ASSIGN_OR_RETURN(const AttentionShapes s, CheckAttentionInputs(*q, *b, *v, attributes_));
    TRAIND_ASSIGN_OR_RETURN(Tensor * o, context.AllocateOutput(0, DataType::kFloat32, WithMatrix(s.batch, s.lq, s.dv)));
    // P in the output when wanted, otherwise in scratch (AllocateOutput gives a scratch tensor then).
    TRAIND_ASSIGN_OR_RETURN(Tensor * p, context.AllocateOutput(1, DataType::kFloat32, WithMatrix(s.batch, s.lq, s.lk)));
    const int64_t n = s.batches;
    const Matrix scores{context.mem(*p), 0, s.lk, false, s.lq * s.lk};
    TRAIND_RETURN_IF_ERROR(BatchedProduct(
        context, n, s.lq, s.lk, s.d, attributes_.scale, Matrix{context.mem(*q), 0, s.d, false, s.lq * s.d},
        Matrix{context.mem(*b), 0, attributes_.trans_b ? s.d : s.lk, attributes_.trans_b, s.d * s.lk}, scores));
    const int64_t rows = n * s.lq;
    if (rows > 0 && s.lk > 0) {
      // softmax_f32 over [rows, Lk, 1], in place.
      TRAIND_RETURN_IF_ERROR(softmax_.Launch1D(context, rows, context.mem(*p), context.mem(*p), rows, s.lk, int64_t{1},
                                               int32_t{0}));
    }
    return BatchedProduct(context, n, s.lq, s.dv, s.lk, 1.0f, scores,
                          Matrix{context.mem(*v), 0, s.dv, false, s.lk * s.dv},
                          Matrix{context.mem(*o), 0, s.dv, false, s.lq * s.dv});
  }

 private:
  ClKernel softmax_;
  AttentionAttributes attributes_;
};

class ScaledDotProductAttentionGradGpuKernel final : public GpuKernel {
 public:
  ScaledDotProductAttentionGradGpuKernel(ClKernel softmax_grad, AttentionAttributes attributes)
      : softmax_grad_(std::move(softmax_grad)), attributes_(attributes) {}

  absl::Status Compute(GpuKernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const AttentionGradOperands operands, AttentionGradInputs(context, attributes_));
    const Tensor *dout = operands.dout, *q = operands.q, *b = operands.b, *v = operands.v, *p = operands.p;
    const AttentionShapes& s = operands.shapes;
    const int64_t n = s.batches;
    const bool trans_b = attributes_.trans_b;
    const Matrix p_matrix{context.mem(*p), 0, s.lk, false, s.lq * s.lk};
    const Matrix dout_matrix{context.mem(*dout), 0, s.dv, false, s.lq * s.dv};
    if (context.wants_output(2)) {  // dV = P^T dO
      TRAIND_ASSIGN_OR_RETURN(Tensor * dv, context.AllocateOutput(2, DataType::kFloat32, v->shape()));
      Matrix p_transposed = p_matrix;
      p_transposed.transposed = true;
      TRAIND_RETURN_IF_ERROR(BatchedProduct(context, n, s.lk, s.dv, s.lq, 1.0f, p_transposed, dout_matrix,
                                            Matrix{context.mem(*dv), 0, s.dv, false, s.lk * s.dv}));
    }
    if (!context.wants_output(0) && !context.wants_output(1)) return absl::OkStatus();
    const int64_t score_count = n * s.lq * s.lk;
    if (score_count == 0) {  // every product below is empty or has k = 0
      for (int output : {0, 1}) {
        if (!context.wants_output(output)) continue;
        TRAIND_ASSIGN_OR_RETURN(Tensor * gradient,
                                context.AllocateOutput(output, DataType::kFloat32, (output == 0 ? q : b)->shape()));
        if (gradient->num_elements() > 0) {
          TRAIND_RETURN_IF_ERROR(context.stream().Fill(context.mem(*gradient), 0.0f, gradient->num_elements()));
        }
      }
      return absl::OkStatus();
    }
    TRAIND_ASSIGN_OR_RETURN(DeviceMemory scores, context.Scratch(static_cast<size_t>(score_count) * sizeof(float)));
    const Matrix ds{scores.mem(), 0, s.lk, false, s.lq * s.lk};
    // dP = dO V^T, then dS in place.
    TRAIND_RETURN_IF_ERROR(BatchedProduct(context, n, s.lq, s.lk, s.dv, 1.0f, dout_matrix,
                                          Matrix{context.mem(*v), 0, s.dv, true, s.lk * s.dv}, ds));
    TRAIND_RETURN_IF_ERROR(softmax_grad_.Launch1D(context, n * s.lq, scores.mem(), context.mem(*p), n * s.lq, s.lk,
                                                  attributes_.scale));
    if (context.wants_output(0)) {  // dQ = dS op(B)^T: the keys as stored
      TRAIND_ASSIGN_OR_RETURN(Tensor * dq, context.AllocateOutput(0, DataType::kFloat32, q->shape()));
      const Matrix keys = trans_b ? Matrix{context.mem(*b), 0, s.d, false, s.lk * s.d}
                                  : Matrix{context.mem(*b), 0, s.lk, true, s.d * s.lk};
      TRAIND_RETURN_IF_ERROR(BatchedProduct(context, n, s.lq, s.d, s.lk, 1.0f, ds, keys,
                                            Matrix{context.mem(*dq), 0, s.d, false, s.lq * s.d}));
    }
    if (context.wants_output(1)) {
      TRAIND_ASSIGN_OR_RETURN(Tensor * db, context.AllocateOutput(1, DataType::kFloat32, b->shape()));
      const Matrix q_matrix{context.mem(*q), 0, s.d, false, s.lq * s.d};
      if (trans_b) {  // dK = dS^T Q
        Matrix ds_transposed = ds;
        ds_transposed.transposed = true;
        TRAIND_RETURN_IF_ERROR(BatchedProduct(context, n, s.lk, s.d, s.lq, 1.0f, ds_transposed, q_matrix,
                                              Matrix{context.mem(*db), 0, s.d, false, s.lk * s.d}));
      } else {  // d(K^T) = Q^T dS
        Matrix q_transposed = q_matrix;
        q_transposed.transposed = true;
        TRAIND_RETURN_IF_ERROR(BatchedProduct(context, n, s.d, s.lk, s.lq, 1.0f, q_transposed, ds,
                                              Matrix{context.mem(*db), 0, s.lk, false, s.d * s.lk}));
      }
    }
    return absl::OkStatus();
  }

 private:
  ClKernel softmax_grad_;
  AttentionAttributes attributes_;
};

// Interleaved operands come from a CPU plan's layout folding only; GPU plans keep the model's nodes.
absl::Status RequirePlainOperands(const GpuKernelInit& init, const AttentionAttributes& attributes) {
  if (attributes.q_slot >= 0 || attributes.o_interleaved || attributes.dout_interleaved) {
    return init.Unsupported("interleaved attention operands run on the CPU executor only");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateScaledDotProductAttentionGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1, 2}));
  TRAIND_ASSIGN_OR_RETURN(const AttentionAttributes attributes, ParseAttentionAttributes(init));
  TRAIND_RETURN_IF_ERROR(RequirePlainOperands(init, attributes));
  TRAIND_ASSIGN_OR_RETURN(ClKernel softmax, init.Kernel("softmax_ops.cl", "softmax_f32"));
  return MakeGpuKernel<ScaledDotProductAttentionGpuKernel>(std::move(softmax), attributes);
}

absl::StatusOr<std::unique_ptr<GpuKernel>> CreateScaledDotProductAttentionGradGpuKernel(const GpuKernelInit& init) {
  TRAIND_RETURN_IF_ERROR(RequireFloat32(init, {0, 1, 2, 3, 4}));
  TRAIND_ASSIGN_OR_RETURN(const AttentionAttributes attributes, ParseAttentionAttributes(init));
  TRAIND_RETURN_IF_ERROR(RequirePlainOperands(init, attributes));
  TRAIND_ASSIGN_OR_RETURN(ClKernel softmax_grad, init.Kernel("attention_ops.cl", "scaled_softmax_grad_rows_f32"));
  return MakeGpuKernel<ScaledDotProductAttentionGradGpuKernel>(std::move(softmax_grad), attributes);
}

}  // namespace traind::engine::gpu
