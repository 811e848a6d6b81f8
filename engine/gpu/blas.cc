#include "engine/gpu/blas.h"

#include <clblast.h>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace traind::engine::gpu {
namespace {

absl::Status BlasStatus(clblast::StatusCode code, const char* routine, int64_t m, int64_t n, int64_t k) {
  if (code == clblast::StatusCode::kSuccess) return absl::OkStatus();
  const int value = static_cast<int>(code);
  const std::string message = absl::StrCat("CLBlast ", routine, " (", m, "x", n, "x", k, ") failed with status ",
                                           value, value > -1000 ? absl::StrCat(" (", ClErrorName(value), ")") : "");
  switch (code) {
    case clblast::StatusCode::kOpenCLOutOfResources:
    case clblast::StatusCode::kOpenCLOutOfHostMemory:
    case clblast::StatusCode::kTempBufferAllocFailure:
    case clblast::StatusCode::kInvalidBufferSize:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

clblast::Transpose Op(const Matrix& matrix) {
  return matrix.transposed ? clblast::Transpose::kYes : clblast::Transpose::kNo;
}

}  // namespace

absl::Status Gemm(Stream& stream, int64_t m, int64_t n, int64_t k, float alpha, const Matrix& a, const Matrix& b,
                  float beta, const Matrix& c) {
  if (m == 0 || n == 0) return absl::OkStatus();
  cl_command_queue queue = stream.queue();
  // CLBlast would allocate its temporary buffer itself; taking it from the pool keeps it in the accounting.
  size_t temp_bytes = 0;
  const clblast::StatusCode sized = clblast::GemmTempBufferSize<float>(
      clblast::Layout::kRowMajor, Op(a), Op(b), m, n, k, a.offset, a.ld, b.offset, b.ld, c.offset, c.ld, &queue,
      temp_bytes);
  TRAIND_RETURN_IF_ERROR(BlasStatus(sized, "GemmTempBufferSize", m, n, k));
  DeviceMemory temp;
  if (temp_bytes > 0) {
    TRAIND_ASSIGN_OR_RETURN(temp, stream.Allocate(temp_bytes * sizeof(float)));
  }
  const clblast::StatusCode code =
      clblast::Gemm<float>(clblast::Layout::kRowMajor, Op(a), Op(b), m, n, k, alpha, a.mem, a.offset, a.ld, b.mem,
                           b.offset, b.ld, beta, c.mem, c.offset, c.ld, &queue, nullptr, temp.mem());
  return BlasStatus(code, "Gemm", m, n, k);
}

absl::Status GemmStridedBatched(Stream& stream, int64_t m, int64_t n, int64_t k, float alpha, const Matrix& a,
                                const Matrix& b, float beta, const Matrix& c, int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return absl::OkStatus();
  if (batch == 1) return Gemm(stream, m, n, k, alpha, a, b, beta, c);
  cl_command_queue queue = stream.queue();
  const clblast::StatusCode code = clblast::GemmStridedBatched<float>(
      clblast::Layout::kRowMajor, Op(a), Op(b), m, n, k, alpha, a.mem, a.offset, a.ld, a.stride, b.mem, b.offset,
      b.ld, b.stride, beta, c.mem, c.offset, c.ld, c.stride, batch, &queue, nullptr);
  return BlasStatus(code, "GemmStridedBatched", m, n, k);
}

}  // namespace traind::engine::gpu
