// Copies a strided view of a tensor into a contiguous output: the shared inner loop of Transpose (a permuted
// view) and Slice (a stepped view).
#ifndef TRAIND_ENGINE_OPS_STRIDED_COPY_H_
#define TRAIND_ENGINE_OPS_STRIDED_COPY_H_

#include <algorithm>
#include <cstdint>

#include "absl/types/span.h"
#include "engine/core/shape.h"
#include "engine/core/thread_pool.h"

namespace traind::engine {

// out[i_0, ..., i_{r-1}] = in[sum_d i_d * strides[d]], strides in elements (negative ones allowed).
// Preconditions: rank >= 1, strides.size() == rank, every addressed input element exists, out has
// ElementCount(out_shape) > 0 elements. Rows (the last dim) are split across threads.
template <typename T>
void CopyStridedView(const T* in, const Shape& out_shape, absl::Span<const int64_t> strides, T* out,
                     ThreadPool& threads) {
  const int64_t rank = static_cast<int64_t>(out_shape.size());
  const int64_t row = out_shape[rank - 1];
  const int64_t row_stride = strides[rank - 1];
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < rank; ++d) rows *= out_shape[d];
  threads.ParallelFor(rows, std::max<int64_t>(1, kParallelElementThreshold / row), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      // Input offset of output row r: mixed-radix decomposition of r.
      int64_t offset = 0;
      int64_t rest = r;
      for (int64_t d = rank - 2; d >= 0; --d) {
        offset += (rest % out_shape[d]) * strides[d];
        rest /= out_shape[d];
      }
      const T* src = in + offset;
      T* dst = out + r * row;
      if (row_stride == 1) {
        std::copy(src, src + row, dst);
      } else {
        for (int64_t i = 0; i < row; ++i) dst[i] = src[i * row_stride];
      }
    }
  });
}

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_STRIDED_COPY_H_
