// Numerically stable softmax / log softmax over the middle axis of an [n, inner] slab (a block of
// inner positions at a time), shared by the Softmax family and SoftmaxCrossEntropyLoss.
#ifndef TRAIND_ENGINE_OPS_SOFTMAX_SLAB_H_
#define TRAIND_ENGINE_OPS_SOFTMAX_SLAB_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "engine/ops/fast_math.h"
#include "engine/ops/row_statistics.h"

namespace traind::engine {

// Inner positions handled together in the strided (inner > 1) loops: per-position maxima and sums
// live on the stack and each pass over the axis is a contiguous, vectorisable loop over the block.
inline constexpr int64_t kSoftmaxInnerBlock = 256;

#if defined(__AVX512F__)
// The largest of a vector's lanes, halving in registers.
inline float LanesMax(__m512 v) {
  typedef float Half __attribute__((vector_size(32)));
  typedef float Quarter __attribute__((vector_size(16)));
  const FloatLanes lanes = v;
  const Half low = __builtin_shufflevector(lanes, lanes, 0, 1, 2, 3, 4, 5, 6, 7);
  const Half high = __builtin_shufflevector(lanes, lanes, 8, 9, 10, 11, 12, 13, 14, 15);
  const Half half = low > high ? low : high;
  const Quarter q_low = __builtin_shufflevector(half, half, 0, 1, 2, 3);
  const Quarter q_high = __builtin_shufflevector(half, half, 4, 5, 6, 7);
  const Quarter quarter = q_low > q_high ? q_low : q_high;
  const float a = quarter[0] > quarter[1] ? quarter[0] : quarter[1];
  const float b = quarter[2] > quarter[3] ? quarter[2] : quarter[3];
  return a > b ? a : b;
}

// Softmax (or log softmax) of `rows` contiguous float rows of n, x into y: the inner == 1 case (the last axis:
// attention scores, a classifier's logits). AVX-512 lanes throughout, a row's last partial vector by masked loads and
// stores, the exponentials by ExpOfNonPositive512 (x - max <= 0). A row is a chain of dependent steps (maximum, its
// broadcast, exponentials, sum, its inverse) too short on attention's rows of 64 to keep the core busy: the rows go in
// groups of four, each step done for the four before the next, so that the core overlaps four independent chains
// (groups of eight gain nothing more). 4096 rows of 64 (the transformer's attention, 1 thread, Zen 5): oneDNN's
// softmax primitive 0.106 ms, this one row at a time 0.072, in groups of four 0.054. NaN: skipped by the maximum, as
// in SoftmaxSlab, and carried by the sum into its row.
inline void SoftmaxRows(const float* x, float* y, int64_t rows, int64_t n, bool log) {
  constexpr int kGroup = 4;
  const int64_t whole = n / kFloatLanes * kFloatLanes;
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - whole)) - 1u);
  const __m512 minus_infinity = Splat(-std::numeric_limits<float>::infinity());
  for (int64_t first = 0; first < rows; first += kGroup) {
    const int count = static_cast<int>(std::min<int64_t>(kGroup, rows - first));
    __m512 max[kGroup], sums[kGroup];
    for (int r = 0; r < count; ++r) {
      const float* row = x + (first + r) * n;
      __m512 maxima = minus_infinity;
      // vmaxps returns its second operand where either is NaN: a NaN of x leaves the maxima as they were.
      for (int64_t a = 0; a < whole; a += kFloatLanes) {
        maxima = _mm512_maskz_max_ps(0xFFFF, _mm512_loadu_ps(row + a), maxima);
      }
      if (tail != 0) {
        maxima = _mm512_maskz_max_ps(0xFFFF, _mm512_mask_loadu_ps(minus_infinity, tail, row + whole), maxima);
      }
      max[r] = Splat(LanesMax(maxima));
    }
    for (int r = 0; r < count; ++r) {
      const float* row = x + (first + r) * n;
      float* out = y + (first + r) * n;
      __m512 sum = _mm512_setzero_ps();
      for (int64_t a = 0; a < whole; a += kFloatLanes) {
        const __m512 e = ExpOfNonPositive512(_mm512_sub_ps(_mm512_loadu_ps(row + a), max[r]));
        if (!log) _mm512_storeu_ps(out + a, e);
        sum = _mm512_add_ps(sum, e);
      }
      if (tail != 0) {
        const __m512 e = _mm512_maskz_mov_ps(
            tail, ExpOfNonPositive512(_mm512_sub_ps(_mm512_mask_loadu_ps(max[r], tail, row + whole), max[r])));
        if (!log) _mm512_mask_storeu_ps(out + whole, tail, e);
        sum = _mm512_add_ps(sum, e);
      }
      sums[r] = sum;
    }
    for (int r = 0; r < count; ++r) {
      const float* row = x + (first + r) * n;
      float* out = y + (first + r) * n;
      const float sum = static_cast<float>(HorizontalSum<float>(sums[r]));
      if (log) {
        // (x - max) - log(sum), in that order (see SoftmaxSlab).
        const __m512 log_sum = Splat(std::log(sum));
        for (int64_t a = 0; a < whole; a += kFloatLanes) {
          _mm512_storeu_ps(out + a, _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(row + a), max[r]), log_sum));
        }
        if (tail != 0) {
          _mm512_mask_storeu_ps(
              out + whole, tail,
              _mm512_sub_ps(_mm512_sub_ps(_mm512_mask_loadu_ps(max[r], tail, row + whole), max[r]), log_sum));
        }
      } else {
        const __m512 inverse = Splat(1.0f / sum);
        for (int64_t a = 0; a < whole; a += kFloatLanes) {
          _mm512_storeu_ps(out + a, _mm512_mul_ps(_mm512_loadu_ps(out + a), inverse));
        }
        if (tail != 0) {
          _mm512_mask_storeu_ps(out + whole, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, out + whole), inverse));
        }
      }
    }
  }
}

inline void SoftmaxRow(const float* x, float* y, int64_t n, bool log) { SoftmaxRows(x, y, 1, n, log); }
#else
// Softmax (or log softmax) of one contiguous float row x[0, n) into y: the inner == 1 case (the last axis, a
// classifier's logits), where SoftmaxSlab's loops call the scalar expf once per element (a log softmax over 1000
// classes took 7 ms for 1024 rows). The row in 16-lane vectors of FastExp; the sum in 16 partial sums added in a
// fixed order.
inline void SoftmaxRow(const float* x, float* y, int64_t n, bool log) {
  constexpr float kExpUnderflow = -87.3f;
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
    // FastExp clamps its argument at -87.3: below that (a -inf logit, attention's mask) the probability is 0, not
    // FastExp's 1e-38.
    const FloatLanes d = v - max;
    const FloatLanes e = d < kExpUnderflow ? FloatLanes{} : FastExp(d);
    if (!log) std::memcpy(y + a, &e, sizeof(e));
    sums += e;
  }
  float partial[kFloatLanes];
  for (int l = 0; l < kFloatLanes; ++l) partial[l] = sums[l];
  for (int64_t a = whole; a < n; ++a) {
    const float d = x[a] - max;
    const float e = d < kExpUnderflow ? 0.0f : FastExp(d);
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

inline void SoftmaxRows(const float* x, float* y, int64_t rows, int64_t n, bool log) {
  for (int64_t r = 0; r < rows; ++r) SoftmaxRow(x + r * n, y + r * n, n, log);
}
#endif

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
