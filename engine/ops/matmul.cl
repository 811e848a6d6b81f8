// Gemm's C term (matmul.cc): Y = beta * C broadcast to [m, n], before the product accumulates into Y. The products
// themselves are CLBlast's (engine/gpu/blas.h).
__kernel void gemm_broadcast_c(__global const float* c, __global float* y, long m, long n, long c_rows, long c_cols,
                               float beta) {
  const long i = get_global_id(0);
  if (i >= m * n) return;
  const long row = i / n, col = i % n;
  y[i] = beta * c[(c_rows == 1 ? 0 : row * c_cols) + (c_cols == 1 ? 0 : col)];
}
