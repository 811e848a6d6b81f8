// Branch-free float approximations of libm functions, written so that loops calling them vectorise
// (glibc's scalar erff is a function call per element and dominated GELU-heavy models).
#ifndef TRAIND_ENGINE_OPS_FAST_MATH_H_
#define TRAIND_ENGINE_OPS_FAST_MATH_H_

#include <algorithm>

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

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_FAST_MATH_H_
