// Matrix products on the device with CLBlast (Debian's libclblast: an OpenCL BLAS tuned per device, NVIDIA, AMD,
// Intel, Mali and Adreno included). Row-major float32; offsets, leading dimensions and strides in elements.
//
// CLBlast compiles each routine's program at its first call per device and process (on pocl ~10 s for GEMM), so the
// GPU kernels use only these two routines; the compiled programs are kept in Device's program cache on disk, so a
// daemon compiles them once per machine, not per start (blas.cc: CLBlast's own API cannot take a binary, its
// exported cache functions can).
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

// Whether CLBlast's programs go through Device's program cache in this process: false where this libclblast does not
// export the cache functions blas.cc uses, or keys them otherwise than CLBlast 1.5-1.7 do (then CLBlast compiles at
// every start, as it would anyway).
bool ClBlastProgramsCached();
// For tests: CLBlast forgets the programs it built, and each routine's next call on a device is a first call again,
// as in a new process.
void ForgetClBlastPrograms();

}  // namespace traind::engine::gpu

#endif  // TRAIND_ENGINE_GPU_BLAS_H_
