// The contract of MatMul and Gemm, one place for both devices (matmul.cc on the CPU, matmul_gpu.cc on the GPU):
// attributes, what the inputs must be and the output's shape.
#ifndef TRAIND_ENGINE_OPS_MATMUL_H_
#define TRAIND_ENGINE_OPS_MATMUL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/core/shape.h"
#include "engine/core/tensor.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

// MatMul(A, B) with numpy's semantics: a 1-D operand is promoted to a matrix (and the promoted dim dropped from the
// output), batch dims broadcast. One dtype, ranks >= 1, matching inner dims.
struct MatMulShapes {
  int64_t m = 0, n = 0, k = 0;
  Shape a_batch, b_batch;  // each operand's batch dims (after promotion)
  Shape batch;             // their broadcast: the output's batch dims
  Shape output;
};
absl::StatusOr<MatMulShapes> CheckMatMulInputs(const Tensor& a, const Tensor& b);

// FusedMatMul(A, B) (domain ai.traind.training): MatMul of op_a(A) and op_b(B), op swapping the last two axes where
// attribute transA / transB is 1; both ranks >= 2, batch dims broadcast as MatMul's. The batched MatMul gradient
// multiplies by transposed operands: read in place, they need no Transpose node and no transposed copy.
struct MatMulTransposes {
  bool a = false, b = false;
};
absl::StatusOr<MatMulTransposes> ParseFusedMatMulAttributes(const KernelInit& init);
absl::StatusOr<MatMulShapes> CheckFusedMatMulInputs(const Tensor& a, const Tensor& b, MatMulTransposes transposes);

// Gemm's attributes; opset 6's `broadcast` (0: C must be exactly [M, N]) and, before opset 11, a required C.
struct GemmAttributes {
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f, beta = 1.0f;
  bool c_must_be_mn = false;
};
absl::StatusOr<GemmAttributes> ParseGemmAttributes(const KernelInit& init);

// Gemm(A, B, C): Y [M, N] = alpha op(A) op(B) + beta C, A and B matrices, C (optional) of rank <= 2 broadcasting
// unidirectionally to [M, N], one dtype.
struct GemmShapes {
  int64_t m = 0, n = 0, k = 0;
  int64_t c_rows = 1, c_cols = 1;  // C's extent (1: broadcast along that dim)
};
absl::StatusOr<GemmShapes> CheckGemmInputs(const Tensor& a, const Tensor& b, const Tensor* c,
                                           const GemmAttributes& attributes);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_MATMUL_H_
