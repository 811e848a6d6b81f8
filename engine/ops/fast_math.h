// Branch-free float approximations of libm functions, written so that loops calling them vectorise
// (glibc's scalar erff is a function call per element and dominated GELU-heavy models).
#ifndef TRAIND_ENGINE_OPS_FAST_MATH_H_
#define TRAIND_ENGINE_OPS_FAST_MATH_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

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

// exp(x) for float, branch-free so that loops calling it vectorise (std::exp is a call per element): Cody-Waite
// reduction x = n ln2 + r, |r| <= ln2/2, Cephes' degree-6 polynomial for exp(r), times 2^n built in the exponent
// bits. Inputs are clamped to [-87.3, 88.3], where 2^n stays a normal float; max error about 2 ulp
// (fast_math_test checks it against std::exp).
inline float FastExp(float x) {
  x = std::min(88.3f, std::max(-87.3f, x));
  // n = round(x / ln2) by adding and subtracting 1.5 * 2^23 (no floor call: that blocks vectorisation).
  constexpr float kRound = 12582912.0f;
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_FAST_MATH_H_
