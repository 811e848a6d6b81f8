// MaxPoolGrad: the gradient goes to the first maximum of each window (row-major), as PyTorch's max_pool2d and the
// forward MaxPool's Indices choose it; finite-difference checks of the rule are in gradient_builder_test.cc.
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/model/traind_schemas.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;
using testing::RandomTensor;

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

// [N, C, H, W] -> [N, H, W, C].
Tensor ToChannelsLast(const Tensor& nchw) {
  const int64_t n = nchw.dim(0), c = nchw.dim(1), h = nchw.dim(2), w = nchw.dim(3);
  Tensor out = *Tensor::Allocate(DataType::kFloat32, {n, h, w, c});
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < c; ++j) {
      for (int64_t k = 0; k < h * w; ++k) {
        out.mutable_data<float>()[(i * h * w + k) * c + j] = nchw.data<float>()[(i * c + j) * h * w + k];
      }
    }
  }
  return out;
}

// ChannelsLastMaxPool and MaxPoolGrad channels_last = 1 (what the channels-last plan pass runs) against MaxPool and
// MaxPoolGrad on the same values in NCHW, bitwise: disjoint 2x2 windows, overlapping padded 3x3 ones, dilated ones
// with ceil_mode; values from a few levels (many ties: the first maximum takes the gradient), 20 channels (a vector of
// 16 and a tail). (A NaN in a window: the channels-last kernels keep PoolReference's rule, the first tap then strictly
// greater, as NCHW's 2x2 path does; NCHW's oneDNN path may pick another.)
TEST(MaxPoolGradTest, ChannelsLastAgreesWithNchwBitwise) {
  struct Case {
    std::vector<int64_t> kernel, strides, pads, dilations;
    int64_t ceil_mode;
    int64_t out_height, out_width;
  };
  const int64_t kBatch = 3, kChannels = 20, kHeight = 9, kWidth = 11;
  Tensor x = RandomTensor({kBatch, kChannels, kHeight, kWidth}, -2, 2, 5);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    x.mutable_data<float>()[i] = std::round(x.data<float>()[i] * 2.0f);  // ties
  }
  for (const Case& c : {Case{{2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 0, 4, 5},
                        Case{{3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 0, 9, 11},
                        Case{{2, 3}, {2, 1}, {0, 1, 1, 0}, {2, 1}, 1, 5, 10}}) {
    SCOPED_TRACE(::testing::PrintToString(c.kernel) + " stride " + ::testing::PrintToString(c.strides));
    auto with_attributes = [&](OpTester tester) {
      tester.AddAttribute("kernel_shape", c.kernel)
          .AddAttribute("strides", c.strides)
          .AddAttribute("pads", c.pads)
          .AddAttribute("dilations", c.dilations)
          .AddAttribute("ceil_mode", c.ceil_mode);
      return tester;
    };
    // Forward: the NCHW MaxPool's output, then the same in channels-last.
    OpTester pool = with_attributes(OpTester("MaxPool", 12));
    pool.AddInputTensor("x", x);
    pool.AddOutputShape("y", DataType::kFloat32, {kBatch, kChannels, c.out_height, c.out_width});
    auto nchw_y = pool.RunRaw();
    ASSERT_TRUE(nchw_y.ok()) << nchw_y.status();
    const Tensor& y = (*nchw_y)[0];
    OpTester channels_last_pool =
        with_attributes(OpTester("ChannelsLastMaxPool", kTraindTrainingVersion, kTraindTrainingDomain));
    channels_last_pool.AddInputTensor("x", ToChannelsLast(x));
    channels_last_pool.AddOutputShape("y", DataType::kFloat32, {kBatch, c.out_height, c.out_width, kChannels});
    auto channels_last_y = channels_last_pool.RunRaw();
    ASSERT_TRUE(channels_last_y.ok()) << channels_last_y.status();
    const Tensor expected_y = ToChannelsLast(y);
    ASSERT_EQ((*channels_last_y)[0].shape(), expected_y.shape());
    EXPECT_EQ(std::memcmp((*channels_last_y)[0].raw_data(), expected_y.raw_data(), expected_y.byte_size()), 0);
    // Backward.
    const Tensor dy = RandomTensor(y.shape(), -1, 1, 6);
    OpTester grad = with_attributes(OpTester("MaxPoolGrad", kTraindTrainingVersion, kTraindTrainingDomain));
    grad.AddInputTensor("dy", dy).AddInputTensor("x", x).AddOutputShape("dx", DataType::kFloat32, x.shape());
    auto nchw_dx = grad.RunRaw();
    ASSERT_TRUE(nchw_dx.ok()) << nchw_dx.status();
    OpTester channels_last_grad =
        with_attributes(OpTester("MaxPoolGrad", kTraindTrainingVersion, kTraindTrainingDomain));
    channels_last_grad.AddAttribute("channels_last", int64_t{1});
    channels_last_grad.AddInputTensor("dy", ToChannelsLast(dy)).AddInputTensor("x", ToChannelsLast(x));
    channels_last_grad.AddOutputShape("dx", DataType::kFloat32, {kBatch, kHeight, kWidth, kChannels});
    auto channels_last_dx = channels_last_grad.RunRaw();
    ASSERT_TRUE(channels_last_dx.ok()) << channels_last_dx.status();
    const Tensor expected_dx = ToChannelsLast((*nchw_dx)[0]);
    ASSERT_EQ((*channels_last_dx)[0].shape(), expected_dx.shape());
    EXPECT_EQ(std::memcmp((*channels_last_dx)[0].raw_data(), expected_dx.raw_data(), expected_dx.byte_size()), 0);
  }
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
