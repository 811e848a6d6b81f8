// Numerically stable softmax / log softmax over the middle axis of an [n, inner] slab (a block of
// inner positions at a time), shared by the Softmax family and SoftmaxCrossEntropyLoss.
#ifndef TRAIND_ENGINE_OPS_SOFTMAX_SLAB_H_
#define TRAIND_ENGINE_OPS_SOFTMAX_SLAB_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "engine/ops/fast_math.h"

namespace traind::engine {

// Inner positions handled together in the strided (inner > 1) loops: per-position maxima and sums
// live on the stack and each pass over the axis is a contiguous, vectorisable loop over the block.
inline constexpr int64_t kSoftmaxInnerBlock = 256;

// Softmax (or log softmax) of one contiguous float row x[0, n) into y: the inner == 1 case (the last axis, a
// classifier's logits), where SoftmaxSlab's loops call the scalar expf once per element (a log softmax over 1000
// classes took 7 ms for 1024 rows). The row in 16-lane vectors of FastExp; the sum in 16 partial sums added in a
// fixed order.
inline void SoftmaxRow(const float* x, float* y, int64_t n, bool log) {
  // The maximum, NaN skipped as in SoftmaxSlab (a compare with NaN is false), lane by lane (GCC keeps a float
  // max reduction scalar).
  const int64_t whole = n / kFloatLanes * kFloatLanes;
  FloatLanes maxima = FloatLanes{} - std::numeric_limits<float>::infinity();
  for (int64_t a = 0; a < whole; a += kFloatLanes) {
    FloatLanes v;
    std::memcpy(&v, x + a, sizeof(v));
    maxima = v > maxima ? v : maxima;
  }
  float max = -std::numeric_limits<float>::infinity();
  for (int l = 0; l < kFloatLanes; ++l) max = maxima[l] > max ? maxima[l] : max;
  for (int64_t a = whole; a < n; ++a) max = x[a] > max ? x[a] : max;
  FloatLanes sums = {};
  for (int64_t a = 0; a < whole; a += kFloatLanes) {
    FloatLanes v;
    std::memcpy(&v, x + a, sizeof(v));
    const FloatLanes e = FastExp(v - max);
    if (!log) std::memcpy(y + a, &e, sizeof(e));
    sums += e;
  }
  float partial[kFloatLanes];
  std::memcpy(partial, &sums, sizeof(partial));
  for (int64_t a = whole; a < n; ++a) {
    const float e = FastExp(x[a] - max);
    if (!log) y[a] = e;
    partial[a - whole] += e;
  }
  float sum = 0;
  for (float p : partial) sum += p;
  if (log) {
    // (x - max) - log(sum), in that order (see SoftmaxSlab).
    const float log_sum = std::log(sum);
    for (int64_t a = 0; a < n; ++a) y[a] = (x[a] - max) - log_sum;
  } else {
    const float inverse = 1.0f / sum;
    for (int64_t a = 0; a < n; ++a) y[a] *= inverse;
  }
}

// Softmax (or log softmax) along n of x[n, inner] into y, for inner positions [0, count) of the
// slab (callers offset x and y to a block start); count <= kSoftmaxInnerBlock. Element (a, i) is at
// a * inner + i.
template <typename T>
inline void SoftmaxSlab(const T* x, T* y, int64_t n, int64_t inner, int64_t count, bool log) {
  if constexpr (std::is_same_v<T, float>) {
    if (inner == 1) {
      SoftmaxRow(x, y, n, log);
      return;
    }
  }
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
