// BatchNormalizationGrad / LayerNormalizationGrad: values are checked against float64 finite
// differences in gradient_builder_test.cc and against PyTorch in tests/golden; here, their contracts.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

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

// LayerNormalizationGrad of float rows against the same formulas in float64. Some rows sit far from zero (mean
// 1000, deviation 1) and some start with a value far out (x[0] = mean + `outlier` deviations): the float statistics
// must keep their precision in both.
void ExpectLayerNormGradMatchesFloat64(int64_t kRows, int64_t kRow, float outlier) {
  std::mt19937 generator(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(kRows * kRow), dy(kRows * kRow), scale(kRow);
  for (int64_t r = 0; r < kRows; ++r) {
    const float offset = r % 3 == 1 ? 1000.0f : 0.0f;
    for (int64_t i = 0; i < kRow; ++i) {
      x[r * kRow + i] = offset + normal(generator);
      dy[r * kRow + i] = normal(generator);
    }
    if (r % 4 == 2) x[r * kRow] = offset + outlier;
  }
  for (float& s : scale) s = 1.0f + 0.5f * normal(generator);
  const double epsilon = 1e-5;
  std::vector<float> dx(x.size()), dscale(kRow), dbias(kRow);
  std::vector<double> dscale_sum(kRow, 0.0), dbias_sum(kRow, 0.0);
  for (int64_t r = 0; r < kRows; ++r) {
    const float* xs = &x[r * kRow];
    const float* g = &dy[r * kRow];
    double mean = 0, var = 0;
    for (int64_t i = 0; i < kRow; ++i) mean += xs[i];
    mean /= kRow;
    for (int64_t i = 0; i < kRow; ++i) var += (xs[i] - mean) * (xs[i] - mean);
    var /= kRow;
    const double inv = 1.0 / std::sqrt(var + epsilon);
    double mean_dxhat = 0, mean_dxhat_xhat = 0;
    for (int64_t i = 0; i < kRow; ++i) {
      const double xhat = (xs[i] - mean) * inv;
      mean_dxhat += static_cast<double>(g[i]) * scale[i] / kRow;
      mean_dxhat_xhat += static_cast<double>(g[i]) * scale[i] * xhat / kRow;
      dscale_sum[i] += g[i] * xhat;
      dbias_sum[i] += g[i];
    }
    for (int64_t i = 0; i < kRow; ++i) {
      const double xhat = (xs[i] - mean) * inv;
      dx[r * kRow + i] =
          static_cast<float>(inv * (static_cast<double>(g[i]) * scale[i] - mean_dxhat - xhat * mean_dxhat_xhat));
    }
  }
  for (int64_t i = 0; i < kRow; ++i) {
    dscale[i] = static_cast<float>(dscale_sum[i]);
    dbias[i] = static_cast<float>(dbias_sum[i]);
  }
  OpTester("LayerNormalizationGrad", kTraindTrainingVersion, kTraindTrainingDomain)
      .AddAttribute("epsilon", static_cast<float>(epsilon))
      .AddInput<float>("dy", {kRows, kRow}, dy)
      .AddInput<float>("x", {kRows, kRow}, x)
      .AddInput<float>("scale", {kRow}, scale)
      .AddOutput<float>("dx", {kRows, kRow}, dx)
      .AddOutput<float>("dscale", {kRow}, dscale)
      .AddOutput<float>("db", {kRow}, dbias)
      .SetTolerance(1e-5, 1e-5)
      .Run();
}

TEST(NormalizationGradTest, LayerNormGradInFloatMatchesFloat64) {
  // Rows of 135 (vectors of 16 and a tail), enough of them for the dScale / dB sums to cross their flushes and the
  // threads' blocks; then long rows, where a first value far out would cancel most bits of a one-pass variance.
  ExpectLayerNormGradMatchesFloat64(301, 135, 40.0f);
  ExpectLayerNormGradMatchesFloat64(24, 4099, 3000.0f);
}

// BatchNormalizationGrad with channels_last = 1 (X, dY, dX [N, H, W, C]) against the formulas in float64, per channel
// c = i % C. Channel counts of one vector of lanes, one and a tail, and less than one; enough rows to cross the
// kernel's flushes and blocks; every third channel near 1000 with its first value far out.
// `matrix`: channels_last = 0 on the same values as [rows, C] (the gradient of BatchNorm1d after a Linear), which
// runs the same rows-of-channels loops.
void ExpectChannelsLastBatchNormGradMatchesFloat64(int64_t channels, bool matrix = false) {
  const int64_t kBatch = 3, kHeight = 37, kWidth = 41;
  const int64_t rows = kBatch * kHeight * kWidth;
  std::mt19937 generator(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(rows * channels), dy(rows * channels), scale(channels);
  for (int64_t i = 0; i < rows * channels; ++i) {
    x[i] = (i % channels % 3 == 1 ? 1000.0f : 0.0f) + normal(generator);
    dy[i] = normal(generator);
  }
  for (int64_t c = 0; c < channels; c += 3) x[c] += 30.0f;
  for (float& s : scale) s = 1.0f + 0.5f * normal(generator);
  const double epsilon = 1e-5;
  std::vector<double> mean(channels, 0.0), var(channels, 0.0), sum_dy(channels, 0.0), sum_dy_xhat(channels, 0.0);
  for (int64_t i = 0; i < rows * channels; ++i) mean[i % channels] += x[i] / static_cast<double>(rows);
  for (int64_t i = 0; i < rows * channels; ++i) {
    const double d = x[i] - mean[i % channels];
    var[i % channels] += d * d / static_cast<double>(rows);
  }
  auto xhat = [&](int64_t i) { return (x[i] - mean[i % channels]) / std::sqrt(var[i % channels] + epsilon); };
  for (int64_t i = 0; i < rows * channels; ++i) {
    sum_dy[i % channels] += dy[i];
    sum_dy_xhat[i % channels] += dy[i] * xhat(i);
  }
  std::vector<float> dx(x.size()), dscale(channels), dbias(channels);
  for (int64_t i = 0; i < rows * channels; ++i) {
    const int64_t c = i % channels;
    const double inv = 1.0 / std::sqrt(var[c] + epsilon);
    dx[i] = static_cast<float>(inv * scale[c] *
                               (dy[i] - sum_dy[c] / static_cast<double>(rows) -
                                xhat(i) * sum_dy_xhat[c] / static_cast<double>(rows)));
  }
  for (int64_t c = 0; c < channels; ++c) {
    dscale[c] = static_cast<float>(sum_dy_xhat[c]);
    dbias[c] = static_cast<float>(sum_dy[c]);
  }
  const std::vector<int64_t> shape =
      matrix ? std::vector<int64_t>{rows, channels} : std::vector<int64_t>{kBatch, kHeight, kWidth, channels};
  OpTester("BatchNormalizationGrad", kTraindTrainingVersion, kTraindTrainingDomain)
      .AddAttribute("epsilon", static_cast<float>(epsilon))
      .AddAttribute("channels_last", int64_t{matrix ? 0 : 1})
      .AddInput<float>("dy", shape, dy)
      .AddInput<float>("x", shape, x)
      .AddInput<float>("scale", {channels}, scale)
      .AddOutput<float>("dx", shape, dx)
      .AddOutput<float>("dscale", {channels}, dscale)
      .AddOutput<float>("db", {channels}, dbias)
      .SetTolerance(2e-5, 2e-5)
      .Run();
}

TEST(NormalizationGradTest, ChannelsLastBatchNormGradMatchesFloat64) {
  ExpectChannelsLastBatchNormGradMatchesFloat64(16);
  ExpectChannelsLastBatchNormGradMatchesFloat64(21);
  ExpectChannelsLastBatchNormGradMatchesFloat64(5);
}

TEST(NormalizationGradTest, MatrixBatchNormGradMatchesFloat64) {
  ExpectChannelsLastBatchNormGradMatchesFloat64(16, /*matrix=*/true);
  ExpectChannelsLastBatchNormGradMatchesFloat64(21, /*matrix=*/true);
  ExpectChannelsLastBatchNormGradMatchesFloat64(5, /*matrix=*/true);
}

TEST(NormalizationGradTest, ChannelsLastBatchNormGradInDouble) {
  // The same one-channel contract as in NCHW (x {1, 3} -> xhat {-1, 1}), over two channels interleaved.
  OpTester("BatchNormalizationGrad", kTraindTrainingVersion, kTraindTrainingDomain)
      .AddAttribute("epsilon", 0.0f)
      .AddAttribute("channels_last", int64_t{1})
      .AddInput<double>("dy", {2, 1, 1, 2}, {2, 1, 2, 0})
      .AddInput<double>("x", {2, 1, 1, 2}, {1, 10, 3, 30})
      .AddInput<double>("scale", {2}, {5, 1})
      .AddOutput<double>("dx", {2, 1, 1, 2}, {0, 0, 0, 0})
      .AddOutput<double>("dscale", {2}, {0, -1})
      .AddOutput<double>("db", {2}, {4, 1})
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
