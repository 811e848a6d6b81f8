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

TEST(MaxPoolGradTest, ManyTiesOnTheVectorisedPathsAgreeWithAReferenceLoop) {
  // 35 windows per row pair (the row kernel: full vectors of 16 and 8 lanes, a scalar tail) and 14 or 7 (short
  // rows, packed several row pairs to a run), 5 rows of 2x2 windows and an odd last row and column no window
  // covers. Values from {0, 1, 2} make ties in most windows; the reference picks the first maximum of each window.
  for (const int64_t out_width : {35, 14, 7}) {
    SCOPED_TRACE(out_width);
    const int64_t planes = 3, height = 11, width = 2 * out_width + 1, out_height = 5;
    std::vector<float> x(planes * height * width), dy(planes * out_height * out_width);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7 + i / 5) % 3);
    for (size_t i = 0; i < dy.size(); ++i) dy[i] = 1.0f + static_cast<float>(i);
    std::vector<float> expected(x.size(), 0.0f);
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t oh = 0; oh < out_height; ++oh) {
        for (int64_t ow = 0; ow < out_width; ++ow) {
          int64_t best = -1;
          for (int64_t kh = 0; kh < 2; ++kh) {
            for (int64_t kw = 0; kw < 2; ++kw) {
              const int64_t at = (p * height + 2 * oh + kh) * width + 2 * ow + kw;
              if (best < 0 || x[at] > x[best]) best = at;
            }
          }
          expected[best] = dy[(p * out_height + oh) * out_width + ow];
        }
      }
    }
    OpTester("MaxPoolGrad", kTraindTrainingVersion, kTraindTrainingDomain)
        .AddAttribute("kernel_shape", std::vector<int64_t>{2, 2})
        .AddAttribute("strides", std::vector<int64_t>{2, 2})
        .AddInput<float>("dy", {1, planes, out_height, out_width}, dy)
        .AddInput<float>("x", {1, planes, height, width}, x)
        .AddOutput<float>("dx", {1, planes, height, width}, expected)
        .Run();
  }
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
