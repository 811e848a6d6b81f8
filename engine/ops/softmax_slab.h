// Numerically stable softmax / log softmax over the middle axis of an [n, inner] slab (a block of
// inner positions at a time), shared by the Softmax family and SoftmaxCrossEntropyLoss.
#ifndef TRAIND_ENGINE_OPS_SOFTMAX_SLAB_H_
#define TRAIND_ENGINE_OPS_SOFTMAX_SLAB_H_

#include <cmath>
#include <cstdint>
#include <limits>

namespace traind::engine {

// Inner positions handled together in the strided (inner > 1) loops: per-position maxima and sums
// live on the stack and each pass over the axis is a contiguous, vectorisable loop over the block.
inline constexpr int64_t kSoftmaxInnerBlock = 256;

// Softmax (or log softmax) along n of x[n, inner] into y, for inner positions [0, count) of the
// slab (callers offset x and y to a block start); count <= kSoftmaxInnerBlock. Element (a, i) is at
// a * inner + i.
template <typename T>
inline void SoftmaxSlab(const T* x, T* y, int64_t n, int64_t inner, int64_t count, bool log) {
  T max[kSoftmaxInnerBlock];
  T sum[kSoftmaxInnerBlock];
  for (int64_t i = 0; i < count; ++i) {
    max[i] = -std::numeric_limits<T>::infinity();
    sum[i] = 0;
  }
  for (int64_t a = 0; a < n; ++a) {
    const T* row = x + a * inner;
    for (int64_t i = 0; i < count; ++i) max[i] = row[i] > max[i] ? row[i] : max[i];
  }
  for (int64_t a = 0; a < n; ++a) {
    const T* row = x + a * inner;
    T* out = y + a * inner;
    for (int64_t i = 0; i < count; ++i) {
      out[i] = std::exp(row[i] - max[i]);
      sum[i] += out[i];
    }
  }
  if (log) {
    // log softmax = (x - max) - log(sum), in that order: x - max is exact for the largest entries, and no log(0)
    // underflows. Not x - (max + log(sum)): max + log(sum) rounds to an ulp of max (6e-5 for max = 1000).
    for (int64_t i = 0; i < count; ++i) sum[i] = std::log(sum[i]);
    for (int64_t a = 0; a < n; ++a) {
      const T* row = x + a * inner;
      T* out = y + a * inner;
      for (int64_t i = 0; i < count; ++i) out[i] = (row[i] - max[i]) - sum[i];
    }
  } else {
    for (int64_t i = 0; i < count; ++i) sum[i] = T(1) / sum[i];
    for (int64_t a = 0; a < n; ++a) {
      T* out = y + a * inner;
      for (int64_t i = 0; i < count; ++i) out[i] *= sum[i];
    }
  }
}

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_SOFTMAX_SLAB_H_
