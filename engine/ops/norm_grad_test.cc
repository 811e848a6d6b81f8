// BatchNormalizationGrad / LayerNormalizationGrad: values are checked against float64 finite
// differences in gradient_builder_test.cc and against PyTorch in tests/golden; here, their contracts.
#include "engine/model/traind_schemas.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

TEST(NormalizationGradTest, ParametersSeeOnlyTheirSums) {
  // dScale = sum(dY * xhat), dB = sum(dY) per channel; a constant dY gives dX = 0 (the mean absorbs it) and
  // dScale = 0 (xhat sums to zero). x per channel: {1, 3} -> xhat {-1, 1} (epsilon 0).
  OpTester("BatchNormalizationGrad", kTraindTrainingVersion, kTraindTrainingDomain)
      .AddAttribute("epsilon", 0.0f)
      .AddInput<double>("dy", {2, 1}, {2, 2})
      .AddInput<double>("x", {2, 1}, {1, 3})
      .AddInput<double>("scale", {1}, {5})
      .AddOutput<double>("dx", {2, 1}, {0, 0})
      .AddOutput<double>("dscale", {1}, {0})
      .AddOutput<double>("db", {1}, {4})
      .SetTolerance(1e-12, 1e-12)
      .Run();
  // Over rows of 2: x {1, 3} -> xhat {-1, 1}; dY {1, 0}: dScale {-1, 0} (+ second row), dB = column sums.
  OpTester("LayerNormalizationGrad", kTraindTrainingVersion, kTraindTrainingDomain)
      .AddAttribute("epsilon", 0.0f)
      .AddInput<double>("dy", {2, 2}, {1, 0, 0, 3})
      .AddInput<double>("x", {2, 2}, {1, 3, 5, 7})
      .AddInput<double>("scale", {2}, {1, 1})
      .AddOutput<double>("dx", {2, 2}, {0, 0, 0, 0})
      .AddOutput<double>("dscale", {2}, {-1, 3})
      .AddOutput<double>("db", {2}, {1, 3})
      .SetTolerance(1e-12, 1e-12)
      .Run();
}

TEST(NormalizationGradTest, RefusesAScaleOfTheWrongSize) {
  for (const char* op : {"BatchNormalizationGrad", "LayerNormalizationGrad"}) {
    auto result = OpTester(op, kTraindTrainingVersion, kTraindTrainingDomain)
                      .AddInput<float>("dy", {2, 3}, std::vector<float>(6, 1.0f))
                      .AddInput<float>("x", {2, 3}, std::vector<float>(6, 1.0f))
                      .AddInput<float>("scale", {2}, {1, 1})
                      .AddOutput<float>("dx", {2, 3}, std::vector<float>(6, 0.0f))
                      .RunRaw();
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << op;
  }
}

}  // namespace
}  // namespace traind::engine
