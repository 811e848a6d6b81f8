// Products of matrices small enough to sit in a core's L1 / L2 cache, on the calling thread: attention's products
// of one head at a time inside its fused kernels (attention_ops.h), where the score matrices never leave the cache.
// oneDNN's sgemm takes ~1 us per call to dispatch and packs B^T into a malloc'd buffer each time B is read
// transposed; a 64 x 64 x 32 product is ~0.55 us of arithmetic at the core's peak.
#ifndef TRAIND_ENGINE_OPS_SMALL_GEMM_H_
#define TRAIND_ENGINE_OPS_SMALL_GEMM_H_

#include <cstdint>

namespace traind::engine {

// A row-major matrix operand read as stored or transposed: element (i, j) of op(X) is data[i * ld + j], or
// data[j * ld + i] when `transposed`.
struct MatrixOperand {
  const float* data;
  int64_t ld;
  bool transposed;
};

// Floats of scratch SmallGemm needs for an op(B) of k x n: B^T is packed there when B is read transposed.
inline int64_t SmallGemmScratchFloats(const MatrixOperand& b, int64_t k, int64_t n) { return b.transposed ? k * n : 0; }

// C[m, n] = alpha * op(A)[m, k] * op(B)[k, n], C row-major with leading dimension ldc (C is written, never read).
// `scratch`: SmallGemmScratchFloats(b, k, n) floats, unaliased with the operands. m, n, k may be 0 (C is zeros
// when k is 0). With AVX-512 a register-tiled kernel; elsewhere oneDNN's sgemm.
void SmallGemm(int64_t m, int64_t n, int64_t k, float alpha, const MatrixOperand& a, const MatrixOperand& b, float* c,
               int64_t ldc, float* scratch);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_SMALL_GEMM_H_
