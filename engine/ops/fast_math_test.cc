#include "engine/ops/fast_math.h"

#include <cmath>
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

}  // namespace
}  // namespace traind::engine
