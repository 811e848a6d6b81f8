// Matrix products on the device with CLBlast (Debian's libclblast: an OpenCL BLAS tuned per device, NVIDIA, AMD,
// Intel, Mali and Adreno included). Row-major float32; offsets, leading dimensions and strides in elements.
//
// CLBlast compiles each routine's kernels on first use per device and process (on pocl, ~10 s for GEMM the first
// time on a machine, then from pocl's own cache), so the GPU kernels use only these two routines.
#ifndef TRAIND_ENGINE_GPU_BLAS_H_
#define TRAIND_ENGINE_GPU_BLAS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/gpu/opencl.h"
#include "engine/gpu/stream.h"

namespace traind::engine::gpu {

struct Matrix {
  cl_mem mem = nullptr;
  int64_t offset = 0;
  int64_t ld = 0;          // leading dimension (row length in memory)
  bool transposed = false;  // use the transpose of what is stored
  int64_t stride = 0;      // between the matrices of a batch
};

// C = alpha * op(A) op(B) + beta * C, with op(A) m x k, op(B) k x n, C m x n.
absl::Status Gemm(Stream& stream, int64_t m, int64_t n, int64_t k, float alpha, const Matrix& a, const Matrix& b,
                  float beta, const Matrix& c);
// The same for `batch` triples, each at its matrix's stride from the previous one (a stride of 0 reuses one
// matrix for the whole batch).
absl::Status GemmStridedBatched(Stream& stream, int64_t m, int64_t n, int64_t k, float alpha, const Matrix& a,
                                const Matrix& b, float beta, const Matrix& c, int64_t batch);

}  // namespace traind::engine::gpu

#endif  // TRAIND_ENGINE_GPU_BLAS_H_
