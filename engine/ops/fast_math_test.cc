#include "engine/ops/fast_math.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gtest/gtest.h"

namespace traind::engine {
namespace {

TEST(FastMathTest, ErfMatchesLibmToAFewUlpEverywhere) {
  double worst_relative = 0, worst_absolute = 0;
  for (float x = -10.0f; x <= 10.0f; x += 1.0f / 4096) {
    const double exact = std::erf(static_cast<double>(x));
    const double error = std::fabs(FastErf(x) - exact);
    worst_absolute = std::max(worst_absolute, error);
    if (std::fabs(exact) > 1e-6) worst_relative = std::max(worst_relative, error / std::fabs(exact));
  }
  EXPECT_LT(worst_absolute, 4e-7);  // about 3 ulp of values near 1
  EXPECT_LT(worst_relative, 1e-6);
  EXPECT_EQ(FastErf(0.0f), 0.0f);
  EXPECT_FLOAT_EQ(FastErf(100.0f), 1.0f);
  EXPECT_FLOAT_EQ(FastErf(-100.0f), -1.0f);
}

TEST(FastMathTest, ExpMatchesLibmToAFewUlpOverTheFloatRange) {
  double worst_relative = 0;
  for (float x = -87.0f; x <= 88.0f; x += 1.0f / 1024) {
    const double exact = std::exp(static_cast<double>(x));
    worst_relative = std::max(worst_relative, std::fabs(FastExp(x) - exact) / exact);
  }
  EXPECT_LT(worst_relative, 3e-7);  // about 2 ulp
  EXPECT_EQ(FastExp(0.0f), 1.0f);
  EXPECT_LT(FastExp(-1000.0f), 1e-37f);  // clamped: tiny, finite, not NaN
  EXPECT_TRUE(std::isfinite(FastExp(1000.0f)));
  EXPECT_TRUE(std::isnan(FastExp(std::numeric_limits<float>::quiet_NaN())));  // a softmax's sum must see it
}

// A range against the double function, in ulp of the float result (normal results; subnormal ones to an absolute
// 1e-44): a million evenly spaced points, and values of every magnitude from 1e-38 up on both signs (the small-|x|
// branches and the rounding near 0).
template <typename Fast, typename Exact>
double WorstUlp(Fast fast, Exact exact, float from, float to) {
  double worst = 0;
  auto check = [&](float x) {
    if (!(x >= from && x <= to)) return;
    const double want = exact(static_cast<double>(x));
    const float got = fast(x);
    if (std::fabs(static_cast<float>(want)) < std::numeric_limits<float>::min()) {
      EXPECT_NEAR(got, want, 1e-44) << x;
      return;
    }
    const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
    worst = std::max(worst, std::fabs(got - want) / ulp);
  };
  constexpr int kPoints = 1 << 20;
  for (int i = 0; i <= kPoints; ++i) check(from + (to - from) * static_cast<float>(i) / kPoints);
  for (double exponent = -38; exponent < 2.1; exponent += 1e-3) {
    const float magnitude = static_cast<float>(std::pow(10.0, exponent));
    check(magnitude);
    check(-magnitude);
  }
  return worst;
}

TEST(FastMathTest, ExpFullRangeSigmoidAndTanhAgainstDouble) {
  EXPECT_LE(WorstUlp(FastExpFullRange, [](double x) { return std::exp(x); }, -110.0f, 90.0f), 2.0);
  EXPECT_LE(WorstUlp(FastSigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, -90.0f, 90.0f), 4.0);
  EXPECT_LE(WorstUlp(FastTanh, [](double x) { return std::tanh(x); }, -10.0f, 10.0f), 6.0);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(FastExpFullRange(89.0f), inf);  // exp overflows float above ~88.72
  EXPECT_EQ(FastExpFullRange(inf), inf);
  EXPECT_EQ(FastExpFullRange(-inf), 0.0f);
  EXPECT_EQ(FastExpFullRange(-105.0f), 0.0f);
  EXPECT_GT(FastExpFullRange(-100.0f), 0.0f);  // subnormal, not flushed
  EXPECT_TRUE(std::isnan(FastExpFullRange(nan)));
  EXPECT_EQ(FastSigmoid(inf), 1.0f);
  EXPECT_EQ(FastSigmoid(-inf), 0.0f);
  EXPECT_TRUE(std::isnan(FastSigmoid(nan)));
  EXPECT_EQ(FastTanh(inf), 1.0f);
  EXPECT_EQ(FastTanh(-inf), -1.0f);
  EXPECT_EQ(FastTanh(100.0f), 1.0f);
  EXPECT_TRUE(std::signbit(FastTanh(-0.0f)));
  EXPECT_TRUE(std::isnan(FastTanh(nan)));
}

// Every 997th positive float (subnormals, all binades, up to the largest finite), against log in double.
TEST(FastMathTest, LogWithinAnUlpOverAllPositiveFloats) {
  double worst = 0;
  for (uint32_t bits = 1; bits < 0x7f800000u; bits += 997) {
    float x;
    std::memcpy(&x, &bits, sizeof(x));
    const double want = std::log(static_cast<double>(x));
    if (want == 0) {
      EXPECT_EQ(FastLog(x), 0.0f);
      continue;
    }
    const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
    worst = std::max(worst, std::fabs(FastLog(x) - want) / ulp);
  }
  EXPECT_LE(worst, 1.5);
  EXPECT_LE(WorstUlp(FastLog, [](double x) { return std::log(x); }, 1e-38f, 200.0f), 1.5);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(FastLog(1.0f), 0.0f);
  EXPECT_EQ(FastLog(0.0f), -inf);
  EXPECT_EQ(FastLog(-0.0f), -inf);
  EXPECT_EQ(FastLog(inf), inf);
  EXPECT_TRUE(std::isnan(FastLog(-1.0f)));
  EXPECT_TRUE(std::isnan(FastLog(-inf)));
  EXPECT_TRUE(std::isnan(FastLog(nan)));
  EXPECT_FLOAT_EQ(FastLog(std::numeric_limits<float>::denorm_min()), -103.27893f);
}

TEST(FastMathTest, Expm1AndLog1pKeepSmallArguments) {
  // Relative to the result: exp(x) - 1 computed plainly has an error of an ulp of 1 (6e-8) absolute, which near
  // x = 1e-5 is 6e-3 relative; these stay within a few ulp of their own result.
  EXPECT_LE(WorstUlp(FastExpm1, [](double x) { return std::expm1(x); }, -20.0f, 88.0f), 4.0);
  EXPECT_LE(WorstUlp(FastLog1p, [](double x) { return std::log1p(x); }, -0.999f, 100.0f), 4.0);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(FastExpm1(0.0f), 0.0f);
  EXPECT_EQ(FastExpm1(1e-30f), 1e-30f);
  EXPECT_EQ(FastExpm1(-inf), -1.0f);
  EXPECT_EQ(FastExpm1(-100.0f), -1.0f);
  EXPECT_EQ(FastExpm1(inf), inf);
  EXPECT_TRUE(std::isnan(FastExpm1(nan)));
  EXPECT_EQ(FastLog1p(0.0f), 0.0f);
  EXPECT_EQ(FastLog1p(1e-30f), 1e-30f);
  EXPECT_EQ(FastLog1p(-1.0f), -inf);
  EXPECT_EQ(FastLog1p(inf), inf);
  EXPECT_TRUE(std::isnan(FastLog1p(-2.0f)));
  EXPECT_TRUE(std::isnan(FastLog1p(nan)));
}

}  // namespace
}  // namespace traind::engine
