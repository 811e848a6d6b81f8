// DirectConv against a float64 convolution of the same channels-last data, for every shape family it takes (3x3
// over 1 channel to 16, 32 and 48 outputs, 5x5 over 1, 3x3 over 3), with and without bias, strides 1 and 2 and
// asymmetric padding on odd sizes; and the geometries it must leave to oneDNN.
#include "engine/ops/direct_conv.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace traind::engine {
namespace {

struct Case {
  int64_t in_channels, out_channels, kernel, stride, pad_top, pad_left, pad_bottom, pad_right;
  bool bias;
};

std::vector<float> Wave(int64_t n, float scale, float phase) {
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[i] = scale * std::sin(0.37f * static_cast<float>(i) + phase);
  return values;
}

TEST(DirectConvTest, EqualsAFloat64ConvolutionOnEveryShapeItTakes) {
  const Case cases[] = {
      {1, 32, 3, 1, 1, 1, 1, 1, false}, {1, 32, 3, 1, 1, 1, 1, 1, true},  {1, 16, 3, 2, 0, 1, 1, 0, true},
      {1, 48, 3, 1, 0, 0, 0, 0, true},  {1, 16, 5, 1, 2, 2, 2, 2, false}, {3, 16, 3, 2, 1, 1, 1, 1, true},
      {1, 32, 3, 2, 2, 0, 0, 2, false},
  };
  const ThreadPool threads(2);
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "C " << c.in_channels << " M " << c.out_channels << " k " << c.kernel
                                      << " stride " << c.stride << " pads " << c.pad_top << c.pad_left
                                      << c.pad_bottom << c.pad_right << " bias " << c.bias);
    const int64_t batch = 2, height = 9, width = 7;
    DirectConvGeometry g{batch, height, width, c.in_channels, 0, 0, c.out_channels, c.kernel, c.kernel,
                         c.stride, c.stride, c.pad_top, c.pad_left};
    g.out_height = (height + c.pad_top + c.pad_bottom - c.kernel) / c.stride + 1;
    g.out_width = (width + c.pad_left + c.pad_right - c.kernel) / c.stride + 1;
    ASSERT_TRUE(DirectConvApplies(g));
    const std::vector<float> x = Wave(batch * height * width * c.in_channels, 1.0f, 0.1f);
    const std::vector<float> w = Wave(c.out_channels * c.in_channels * c.kernel * c.kernel, 0.5f, 0.7f);
    const std::vector<float> bias = Wave(c.out_channels, 0.3f, 1.3f);
    std::vector<float> y(static_cast<size_t>(batch * g.out_height * g.out_width * c.out_channels), -1.0f);
    DirectConv(g, x.data(), w.data(), c.bias ? bias.data() : nullptr, y.data(), threads);
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t oh = 0; oh < g.out_height; ++oh) {
        for (int64_t ow = 0; ow < g.out_width; ++ow) {
          for (int64_t m = 0; m < c.out_channels; ++m) {
            double expected = c.bias ? bias[m] : 0.0;
            for (int64_t ci = 0; ci < c.in_channels; ++ci) {
              for (int64_t kh = 0; kh < c.kernel; ++kh) {
                for (int64_t kw = 0; kw < c.kernel; ++kw) {
                  const int64_t ih = oh * c.stride - c.pad_top + kh, iw = ow * c.stride - c.pad_left + kw;
                  if (ih < 0 || ih >= height || iw < 0 || iw >= width) continue;
                  expected += static_cast<double>(x[((n * height + ih) * width + iw) * c.in_channels + ci]) *
                              w[((m * c.in_channels + ci) * c.kernel + kh) * c.kernel + kw];
                }
              }
            }
            const float got = y[((n * g.out_height + oh) * g.out_width + ow) * c.out_channels + m];
            ASSERT_NEAR(got, expected, 1e-5 * (1.0 + std::fabs(expected)))
                << "at n " << n << " oh " << oh << " ow " << ow << " m " << m;
          }
        }
      }
    }
  }
}

TEST(DirectConvTest, LeavesToOneDnnWhatItsRegistersCannotHold) {
  DirectConvGeometry g{2, 9, 7, 1, 9, 7, 32, 3, 3, 1, 1, 1, 1};
  EXPECT_TRUE(DirectConvApplies(g));
  g.out_channels = 24;  // not a multiple of 16
  EXPECT_FALSE(DirectConvApplies(g));
  g.out_channels = 64;  // 4 vectors x 9 taps of weights
  EXPECT_FALSE(DirectConvApplies(g));
  g.out_channels = 32;
  g.in_channels = 2;  // 18 taps
  EXPECT_FALSE(DirectConvApplies(g));
  g.in_channels = 3;  // 27 taps, 2 vectors
  EXPECT_FALSE(DirectConvApplies(g));
  g.out_channels = 16;
  EXPECT_TRUE(DirectConvApplies(g));
  g.batch = 0;
  EXPECT_FALSE(DirectConvApplies(g));
}

}  // namespace
}  // namespace traind::engine
