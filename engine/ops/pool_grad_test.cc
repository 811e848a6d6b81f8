// MaxPoolGrad: the gradient goes to the first maximum of each window (row-major), as PyTorch's max_pool2d and the
// forward MaxPool's Indices choose it; finite-difference checks of the rule are in gradient_builder_test.cc.
#include "engine/model/traind_schemas.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

TEST(MaxPoolGradTest, TiesGoToTheFirstMaximumOnTheFastAndGeneralPaths) {
  // Two 2x2 windows side by side: [[1, 3], [3, 0]] (tie between top-right and bottom-left) and [[2, 2], [2, 2]];
  // a fifth column no window covers.
  const std::vector<float> x = {1, 3, 2, 2, 9, 3, 0, 2, 2, 9};
  const std::vector<float> expected = {0, 10, 20, 0, 0, 0, 0, 0, 0, 0};
  OpTester("MaxPoolGrad", kTraindTrainingVersion, kTraindTrainingDomain)  // 2x2 stride 2: the fast path.
      .AddAttribute("kernel_shape", std::vector<int64_t>{2, 2})
      .AddAttribute("strides", std::vector<int64_t>{2, 2})
      .AddInput<float>("dy", {1, 1, 1, 2}, {10, 20})
      .AddInput<float>("x", {1, 1, 2, 5}, x)
      .AddOutput<float>("dx", {1, 1, 2, 5}, expected)
      .Run();
  OpTester("MaxPoolGrad", kTraindTrainingVersion, kTraindTrainingDomain)  // Same windows, general path (3-D).
      .AddAttribute("kernel_shape", std::vector<int64_t>{1, 2, 2})
      .AddAttribute("strides", std::vector<int64_t>{1, 2, 2})
      .AddInput<float>("dy", {1, 1, 1, 1, 2}, {10, 20})
      .AddInput<float>("x", {1, 1, 1, 2, 5}, x)
      .AddOutput<float>("dx", {1, 1, 1, 2, 5}, expected)
      .Run();
}

TEST(MaxPoolGradTest, OverlappingWindowsAccumulate) {
  // Kernel 3, stride 1 over [1, 5, 2, 4]: both windows pick the 5.
  OpTester("MaxPoolGrad", kTraindTrainingVersion, kTraindTrainingDomain)
      .AddAttribute("kernel_shape", std::vector<int64_t>{3})
      .AddInput<double>("dy", {1, 1, 2}, {1.5, 2.0})
      .AddInput<double>("x", {1, 1, 4}, {1, 5, 2, 4})
      .AddOutput<double>("dx", {1, 1, 4}, {0, 3.5, 0, 0})
      .Run();
}

TEST(MaxPoolGradTest, RefusesAGradientOfTheWrongShape) {
  auto result = OpTester("MaxPoolGrad", kTraindTrainingVersion, kTraindTrainingDomain)
                    .AddAttribute("kernel_shape", std::vector<int64_t>{2})
                    .AddInput<float>("dy", {1, 1, 3}, {1, 2, 3})
                    .AddInput<float>("x", {1, 1, 3}, {1, 2, 3})
                    .AddOutput<float>("dx", {1, 1, 3}, {0, 0, 0})
                    .RunRaw();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace traind::engine
