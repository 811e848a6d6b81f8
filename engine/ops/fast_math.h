// Branch-free float approximations of libm functions, written so that loops calling them vectorise
// (glibc's scalar erff is a function call per element and dominated GELU-heavy models).
#ifndef TRAIND_ENGINE_OPS_FAST_MATH_H_
#define TRAIND_ENGINE_OPS_FAST_MATH_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace traind::engine {

// erf(x) for float as an odd/even rational polynomial on [-4, 4] (outside, erf(x) is +-1 in float); the
// coefficients are the minimax fit Eigen uses for its erf(float). Max error about 3 ulp, checked against
// std::erf in fast_math_test.
inline float FastErf(float x) {
  x = std::min(4.0f, std::max(-4.0f, x));
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  p = p * x;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  return p / q;
}

// 64-byte vectors of float (and of their bits), for loops GCC does not vectorise by itself.
typedef float FloatLanes __attribute__((vector_size(64)));
typedef int32_t Int32Lanes __attribute__((vector_size(64)));
inline constexpr int kFloatLanes = 16;

// x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two so that n ln2 is exact): returns e^r by Cephes' degree-6
// polynomial and sets *n (a whole number; 0 where x is NaN, whose e^r is NaN). For |x| < 2^22 ln2.
template <typename V>
inline V ExpOfRemainder(V x, V* n) {
  // n = round(x / ln2) by adding and subtracting 1.5 * 2^23 (no floor call: that blocks vectorisation).
  constexpr float kRound = 12582912.0f;
  V whole = (x * 1.44269504088896341f + kRound) - kRound;
  const V r = (x - whole * 0.693359375f) + whole * 2.12194440e-4f;
  V p = V{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  *n = whole == whole ? whole : V{};  // NaN converts as 0: no undefined conversion
  return p * r * r + r + 1.0f;
}

// exp(x) for float, branch-free so that loops calling it vectorise (std::exp is a call per element): Cody-Waite
// reduction x = n ln2 + r, |r| <= ln2/2, Cephes' degree-6 polynomial for exp(r), times 2^n built in the exponent
// bits. Inputs are clamped to [-87.3, 88.3], where 2^n stays a normal float; max error about 2 ulp
// (fast_math_test checks it against std::exp). NaN gives NaN (a softmax's sum must see it). One body for a float
// and for FloatLanes (the same operations lane by lane, so both give the same bits).
template <typename V, typename Bits>
inline V FastExpOf(V x) {
  // Compares that keep a NaN (std::max / std::min would turn it into a bound).
  x = x < -87.3f ? V{} - 87.3f : x;
  x = x > 88.3f ? V{} + 88.3f : x;
  V n;
  const V y = ExpOfRemainder(x, &n);
  Bits bits;
  if constexpr (std::is_same_v<V, float>) {
    bits = (static_cast<int32_t>(n) + 127) << 23;
  } else {
    bits = (__builtin_convertvector(n, Bits) + 127) << 23;
  }
  V scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

inline float FastExp(float x) { return FastExpOf<float, int32_t>(x); }
inline FloatLanes FastExp(FloatLanes x) { return FastExpOf<FloatLanes, Int32Lanes>(x); }

// exp(x) over all of float, as the Exp op needs it: +inf above ~88.72, 0 below ~-103.97, subnormal results in
// between (2^n applied in two halves so that neither leaves the normal range), NaN for NaN; max error about 2 ulp
// on normal results. FastExp's reduction and polynomial.
inline float FastExpFullRange(float x) {
  x = x < -104.0f ? -104.0f : x;
  x = x > 89.0f ? 89.0f : x;
  float n;
  const float y = ExpOfRemainder(x, &n);
  const int32_t whole = static_cast<int32_t>(n);  // in [-150, 129]
  const int32_t half = whole / 2;                 // both halves in [-75, 65]: normal powers of two
  const int32_t low_bits = (half + 127) << 23, high_bits = (whole - half + 127) << 23;
  float low, high;
  std::memcpy(&low, &low_bits, sizeof(low));
  std::memcpy(&high, &high_bits, sizeof(high));
  return (y * low) * high;
}

// 1 / (1 + exp(-x)) by the sign, so that exp never overflows: e = exp(-|x|) in (0, 1], then 1 / (1 + e) for
// x >= 0 and e / (1 + e) below. About 3 ulp; NaN for NaN.
inline float FastSigmoid(float x) {
  const float e = FastExpFullRange(-std::fabs(x));
  const float inverse = 1.0f / (1.0f + e);
  return x >= 0.0f ? inverse : e * inverse;
}

// tanh(x) as an odd rational function on [-7.9, 7.9] (the fit clamped there up to 9), +-1 from 9 on and x itself
// below 4e-4 in magnitude (where tanh(x) rounds to x); the minimax fit Eigen uses for its float tanh. A few ulp;
// NaN for NaN.
inline float FastTanh(float x) {
  const float clamped = x < -7.90531110763549805f ? -7.90531110763549805f
                        : x > 7.90531110763549805f ? 7.90531110763549805f
                                                    : x;
  const float x2 = clamped * clamped;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * clamped;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  // From 9 on tanh rounds to +-1; the fit at the clamp can land an ulp below (builds differ in how they round it).
  const float magnitude = std::fabs(x);
  return magnitude >= 9.0f ? std::copysign(1.0f, x) : magnitude < 0.0004f ? x : p / q;
}

// log(x) for float, branch-free: x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(x) = e ln2 + log(m), log(m) by
// Cephes' degree-9 polynomial in f = m - 1 (ln2 split in two so that e ln2 adds exactly). Subnormal x is scaled by
// 2^23 first. log(0) = -inf, log(inf) = inf, NaN for x < 0 and for NaN; about 1 ulp (fast_math_test).
inline float FastLog(float x) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const bool subnormal = x < std::numeric_limits<float>::min();  // (or zero, or negative: replaced below)
  const float scaled = subnormal ? x * 8388608.0f : x;
  int32_t bits;
  std::memcpy(&bits, &scaled, sizeof(bits));
  const int32_t exponent = ((bits >> 23) & 0xff) - 126;  // scaled = m 2^exponent with m in [0.5, 1)
  const int32_t mantissa_bits = (bits & 0x007fffff) | 0x3f000000;
  float m;
  std::memcpy(&m, &mantissa_bits, sizeof(m));
  // Below sqrt(1/2) take 2m and one less in the exponent, so that f is in [-0.293, 0.414).
  const bool low = m < 0.707106781186547524f;
  const float f = low ? (m + m) - 1.0f : m - 1.0f;
  const float e = static_cast<float>(exponent - (low ? 1 : 0)) - (subnormal ? 23.0f : 0.0f);
  const float z = f * f;
  float p = 7.0376836292e-2f;
  p = p * f + -1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f + -1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f + -1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f + -2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  const float y = (p * f * z + e * -2.12194440e-4f) - 0.5f * z;
  float result = (f + y) + e * 0.693359375f;
  result = x == kInf ? kInf : result;
  result = x == 0.0f ? -kInf : result;
  return x >= 0.0f ? result : std::numeric_limits<float>::quiet_NaN();  // x < 0 or NaN
}

// exp(x) - 1 without the cancellation near 0: with u = exp(x) rounded, (u - 1) * x / log(u) is exact to a few
// ulp whatever u's rounding (Kahan's trick), and u - 1 itself where |x| >= 0.5 (no cancellation there) or u is
// 1. Both are computed and one chosen, so loops vectorise. -1 below about -17, inf above ~88.72, NaN for NaN.
inline float FastExpm1(float x) {
  const float u = FastExpFullRange(x);
  const float u_minus_one = u - 1.0f;
  const float log_u = FastLog(u);
  const float compensated = u_minus_one * (x / (log_u != 0.0f ? log_u : 1.0f));  // (unused where log(u) is 0)
  return std::fabs(x) < 0.5f && u != 1.0f ? compensated : u_minus_one == 0.0f ? x : u_minus_one;
}

// log(1 + t) for float without losing t where it is small: with w = 1 + t rounded, log(w) minus the rounding
// ((w - 1) - t) / w (where w rounds to 1 that is log(1) + t = t). Few ulp for t > -1; -inf at -1, NaN below and
// for NaN.
inline float FastLog1p(float t) {
  const float w = 1.0f + t;
  const float result = FastLog(w) - ((w - 1.0f) - t) / (w > 0.0f ? w : 1.0f);
  return t == std::numeric_limits<float>::infinity() ? t : result;  // (inf - 1) - inf is NaN
}

#if defined(__AVX512F__)
inline __m512 Splat(float value) { return _mm512_set1_ps(value); }

// exp(x) for x <= 0 in 16 lanes, FastExp's reduction and polynomial with AVX-512 instructions: the clamp a vmaxps
// (at -104, where exp rounds to 0; vscalefps makes the subnormal results in between) and 2^n a vscalefps. GCC compiles
// FastExp(FloatLanes) into masked copies of its chain, one per side of each clamp: this runs in about 2/5 of the time
// (GeluGrad, softmax rows). NaN gives NaN (the clamp keeps it: vmaxps returns its second operand when either is NaN).
// The maskz forms with every lane set: the plain intrinsics pass GCC 12 an undefined vector it warns of.
inline __m512 ExpOfNonPositive512(__m512 x) {
  x = _mm512_maskz_max_ps(0xFFFF, Splat(-104.0f), x);
  const __m512 n = _mm512_maskz_roundscale_ps(0xFFFF, _mm512_mul_ps(x, Splat(1.44269504088896341f)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, Splat(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, Splat(-2.12194440e-4f), r);
  __m512 p = Splat(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, Splat(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, Splat(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, Splat(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, Splat(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, Splat(5.0000001201e-1f));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), Splat(1.0f));
  return _mm512_maskz_scalef_ps(0xFFFF, y, n);
}
#endif

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_FAST_MATH_H_
