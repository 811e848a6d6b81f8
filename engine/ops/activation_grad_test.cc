// ReluGrad / ErfGrad / GeluGrad, and Gelu, against their formulas evaluated with libm (finite-difference checks of the rules are in
// engine/autodiff/gradient_builder_test.cc).
#include <cmath>

#include "engine/model/traind_schemas.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

TEST(ReluGradTest, PassesTheGradientWhereTheInputIsPositive) {
  OpTester("ReluGrad", kTraindTrainingVersion, kTraindTrainingDomain)
      .AddInput<float>("dy", {4}, {1, 2, 3, 4})
      .AddInput<float>("x", {4}, {-1, 0, 0.5f, 2})
      .AddOutput<float>("dx", {4}, {0, 0, 3, 4})
      .Run();
}

TEST(ErfGradTest, MatchesTheGaussianSlopeInFloatAndDouble) {
  std::vector<float> x, dy, expected;
  std::vector<double> x64, dy64, expected64;
  for (int i = -60; i <= 60; ++i) {
    x.push_back(i / 8.0f);
    dy.push_back(1.0f + i / 100.0f);
    const double slope = 2.0 / std::sqrt(M_PI) * std::exp(-static_cast<double>(x.back()) * x.back());
    expected.push_back(static_cast<float>(dy.back() * slope));
    x64.push_back(x.back());
    dy64.push_back(dy.back());
    expected64.push_back(dy.back() * slope);
  }
  const int64_t n = static_cast<int64_t>(x.size());
  OpTester("ErfGrad", kTraindTrainingVersion, kTraindTrainingDomain)
      .AddInput<float>("dy", {n}, dy)
      .AddInput<float>("x", {n}, x)
      .AddOutput<float>("dx", {n}, expected)
      .SetTolerance(1e-6, 1e-30)
      .Run();
  OpTester("ErfGrad", kTraindTrainingVersion, kTraindTrainingDomain)
      .AddInput<double>("dy", {n}, dy64)
      .AddInput<double>("x", {n}, x64)
      .AddOutput<double>("dx", {n}, expected64)
      .SetTolerance(1e-14, 0)
      .Run();
}

TEST(GeluGradTest, MatchesTheSlopeOfExactGeluInFloatAndDouble) {
  std::vector<float> x, dy, expected;
  std::vector<double> x64, dy64, expected64;
  // -8..8 by 0.1 and values far out on both sides (both clamps of the vector path), 177 in all: eleven vectors of 16
  // and a scalar tail.
  std::vector<float> points;
  for (int i = -80; i <= 80; ++i) points.push_back(i / 10.0f);
  for (float far : {9.5f, 13.0f, 30.0f, 100.0f, 1e4f, 3e38f, 2.5e-30f, 0.0f}) {
    points.push_back(far);
    points.push_back(-far);
  }
  for (const float point : points) {
    x.push_back(point);
    dy.push_back(1.0f - point / 200.0f);
    const double v = x.back();
    const double slope = 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
    expected.push_back(static_cast<float>(dy.back() * slope));
    x64.push_back(v);
    dy64.push_back(dy.back());
    expected64.push_back(dy.back() * slope);
  }
  const int64_t n = static_cast<int64_t>(x.size());
  OpTester("GeluGrad", kTraindTrainingVersion, kTraindTrainingDomain)
      .AddInput<float>("dy", {n}, dy)
      .AddInput<float>("x", {n}, x)
      .AddOutput<float>("dx", {n}, expected)
      .SetTolerance(1e-6, 1e-6)
      .Run();
  // The far values alone, fewer than a vector: the scalar loop's clamps.
  const int64_t tail = 15;
  OpTester("GeluGrad", kTraindTrainingVersion, kTraindTrainingDomain)
      .AddInput<float>("dy", {tail}, std::vector<float>(dy.end() - tail, dy.end()))
      .AddInput<float>("x", {tail}, std::vector<float>(x.end() - tail, x.end()))
      .AddOutput<float>("dx", {tail}, std::vector<float>(expected.end() - tail, expected.end()))
      .SetTolerance(1e-6, 1e-6)
      .Run();
  OpTester("GeluGrad", kTraindTrainingVersion, kTraindTrainingDomain)
      .AddInput<double>("dy", {n}, dy64)
      .AddInput<double>("x", {n}, x64)
      .AddOutput<double>("dx", {n}, expected64)
      .SetTolerance(1e-14, 1e-15)
      .Run();
}

// Gelu (the plan's fused exact GELU): x * Phi(x) over the same points as GeluGrad, the far ones alone too (the scalar
// loop), and NaN through both loops. The absolute tolerance is the formula's own in float32: 1 + erf cancels in the
// left tail (x = -5.5: 2e-7 off a value of -1e-7), as it does in the exported chain and in PyTorch's float GELU.
TEST(GeluTest, MatchesExactGeluWithLibmsErf) {
  std::vector<float> points;
  for (int i = -80; i <= 80; ++i) points.push_back(i / 10.0f);
  for (float far : {9.5f, 13.0f, 30.0f, 100.0f, 1e4f, 3e38f, 2.5e-30f, 0.0f}) {
    points.push_back(far);
    points.push_back(-far);
  }
  std::vector<float> expected;
  for (const float point : points) {
    const double v = point;
    expected.push_back(static_cast<float>(v * 0.5 * (1.0 + std::erf(v / std::sqrt(2.0)))));
  }
  const int64_t n = static_cast<int64_t>(points.size());
  OpTester("Gelu", kTraindTrainingVersion, kTraindTrainingDomain)
      .AddInput<float>("x", {n}, points)
      .AddOutput<float>("y", {n}, expected)
      .SetTolerance(1e-6, 1e-6)
      .Run();
  const int64_t tail = 15;
  OpTester("Gelu", kTraindTrainingVersion, kTraindTrainingDomain)
      .AddInput<float>("x", {tail}, std::vector<float>(points.end() - tail, points.end()))
      .AddOutput<float>("y", {tail}, std::vector<float>(expected.end() - tail, expected.end()))
      .SetTolerance(1e-6, 1e-6)
      .Run();
  std::vector<float> with_nan(17, 1.0f);
  with_nan[3] = with_nan[16] = NAN;
  const absl::StatusOr<std::vector<Tensor>> outputs = OpTester("Gelu", kTraindTrainingVersion, kTraindTrainingDomain)
                                                          .AddInput<float>("x", {17}, with_nan)
                                                          .AddOutput<float>("y", {17}, with_nan)
                                                          .RunRaw();
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_TRUE(std::isnan((*outputs)[0].data<float>()[3]));
  EXPECT_TRUE(std::isnan((*outputs)[0].data<float>()[16]));
  EXPECT_NEAR((*outputs)[0].data<float>()[0], 0.8413447f, 1e-6);
}

TEST(ErfGradTest, RefusesMismatchedShapes) {
  auto result = OpTester("ErfGrad", kTraindTrainingVersion, kTraindTrainingDomain)
                    .AddInput<float>("dy", {2}, {1, 2})
                    .AddInput<float>("x", {3}, {1, 2, 3})
                    .AddOutput<float>("dx", {3}, {0, 0, 0})
                    .RunRaw();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace traind::engine
