// ConvGrad against a direct float64 evaluation of the convolution gradient sums (an independent reference; the
// finite-difference checks of the rule are in engine/autodiff/gradient_builder_test.cc).
#include <random>

#include "engine/model/traind_schemas.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = normal(rng);
  return values;
}

struct ConvGradCase {
  int64_t n, c, h, w, m, g, kh, kw, sh, sw, dh, dw;
  int64_t pt, pl, pb, pr;
};

// X [N, C, H, W], W [M, C/g, KH, KW] -> dX, dW, dB against float64 sums (in both the channels-last and the NCHW
// plan: OpTester runs ConvGrad in both).
void ExpectDirectSums(const ConvGradCase& k) {
  const int64_t n = k.n, c = k.c, h = k.h, w = k.w, m = k.m, g = k.g, kh = k.kh, kw = k.kw, sh = k.sh, sw = k.sw,
                dh = k.dh, dw = k.dw, pt = k.pt, pl = k.pl, pb = k.pb, pr = k.pr;
  const int64_t oh = (h + pt + pb - ((kh - 1) * dh + 1)) / sh + 1, ow = (w + pl + pr - ((kw - 1) * dw + 1)) / sw + 1;
  const int64_t cg = c / g, mg = m / g;
  const std::vector<float> x = Random(n * c * h * w, 1), weights = Random(m * cg * kh * kw, 2),
                           dy = Random(n * m * oh * ow, 3);
  std::vector<double> dx(x.size()), dweights(weights.size()), dbias(static_cast<size_t>(m));
  for (int64_t in = 0; in < n; ++in) {
    for (int64_t om = 0; om < m; ++om) {
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t z = 0; z < ow; ++z) {
          const double grad = dy[((in * m + om) * oh + y) * ow + z];
          dbias[om] += grad;
          for (int64_t ic = 0; ic < cg; ++ic) {
            const int64_t channel = (om / mg) * cg + ic;
            for (int64_t a = 0; a < kh; ++a) {
              for (int64_t b = 0; b < kw; ++b) {
                const int64_t iy = y * sh - pt + a * dh, iz = z * sw - pl + b * dw;
                if (iy < 0 || iy >= h || iz < 0 || iz >= w) continue;
                const int64_t xi = ((in * c + channel) * h + iy) * w + iz;
                const int64_t wi = ((om * cg + ic) * kh + a) * kw + b;
                dx[xi] += weights[wi] * grad;
                dweights[wi] += x[xi] * grad;
              }
            }
          }
        }
      }
    }
  }
  OpTester("ConvGrad", kTraindTrainingVersion, kTraindTrainingDomain)
      .AddAttribute("group", g)
      .AddAttribute("strides", std::vector<int64_t>{sh, sw})
      .AddAttribute("dilations", std::vector<int64_t>{dh, dw})
      .AddAttribute("pads", std::vector<int64_t>{pt, pl, pb, pr})
      .AddInput<float>("dy", {n, m, oh, ow}, dy)
      .AddInput<float>("x", {n, c, h, w}, x)
      .AddInput<float>("w", {m, cg, kh, kw}, weights)
      .AddOutput<float>("dx", {n, c, h, w}, std::vector<float>(dx.begin(), dx.end()))
      .AddOutput<float>("dw", {m, cg, kh, kw}, std::vector<float>(dweights.begin(), dweights.end()))
      .AddOutput<float>("db", {m}, std::vector<float>(dbias.begin(), dbias.end()))
      .SetTolerance(1e-4, 1e-4)
      .Run();
}

TEST(ConvGradTest, MatchesDirectSumsWithGroupsStridesPadsAndDilations) {
  // group 2, stride 2, pads (1, 0, 1, 1), dilation (1, 2).
  ExpectDirectSums({2, 4, 7, 6, 6, 2, 3, 2, 2, 2, 1, 2, 1, 0, 1, 1});
}

// Channels-last, ungrouped, stride 1: dX runs as a forward convolution with the kernel flipped and transposed and
// the pads mirrored, here with a non-square kernel, dilation and uneven pads (including none and the most allowed).
TEST(ConvGradTest, MatchesDirectSumsWhereTheDataGradientRunsAsAForwardConvolution) {
  ExpectDirectSums({2, 5, 7, 6, 3, 1, 3, 2, 1, 1, 1, 2, 1, 0, 2, 2});
  ExpectDirectSums({3, 16, 8, 8, 32, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1});  // ResNet's 3x3, 16 -> 32 channels
  ExpectDirectSums({2, 3, 6, 5, 4, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0});    // 1x1
  // A pad beyond the kernel's extent (1x1 with pad 1): the backward-data primitive as before.
  ExpectDirectSums({2, 3, 4, 5, 4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
}

TEST(ConvGradTest, RefusesAGradientOfTheWrongShape) {
  auto result = OpTester("ConvGrad", kTraindTrainingVersion, kTraindTrainingDomain)
                    .AddInput<float>("dy", {1, 1, 3, 3}, std::vector<float>(9, 1.0f))
                    .AddInput<float>("x", {1, 1, 3, 3}, std::vector<float>(9, 1.0f))
                    .AddInput<float>("w", {1, 1, 2, 2}, std::vector<float>(4, 1.0f))
                    .AddOutput<float>("dx", {1, 1, 3, 3}, std::vector<float>(9, 0.0f))
                    .RunRaw();
  ASSERT_FALSE(result.ok());
}

}  // namespace
}  // namespace traind::engine
