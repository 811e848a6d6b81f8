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

TEST(BatchNormalizationTest, InferencePerChannel) {
  // Channel 0: (x - 1) / 2; channel 1: 2 * (x - 3) + 1.
  OpTester("BatchNormalization", 15)
      .AddAttribute("epsilon", 0.0f)
      .AddInput<float>("x", {1, 2, 1, 2}, {1, 2, 3, 4})
      .AddInput<float>("scale", {2}, {1, 2})
      .AddInput<float>("b", {2}, {0, 1})
      .AddInput<float>("mean", {2}, {1, 3})
      .AddInput<float>("var", {2}, {4, 1})
      .AddOutput<float>("y", {1, 2, 1, 2}, {0, 0.5, 1, 3})
      .Run();
  // Rank 2 input (no spatial dims), double, default epsilon.
  const double eps = 1e-5;
  OpTester("BatchNormalization", 9)
      .AddInput<double>("x", {2, 1}, {1, 3})
      .AddInput<double>("scale", {1}, {1})
      .AddInput<double>("b", {1}, {0})
      .AddInput<double>("mean", {1}, {2})
      .AddInput<double>("var", {1}, {1})
      .AddOutput<double>("y", {2, 1}, {-1 / std::sqrt(1 + eps), 1 / std::sqrt(1 + eps)})
      .Run();
}

TEST(BatchNormalizationTest, TrainingModeUsesBatchStatisticsAndBlendsRunningOnes) {
  // One channel holding 1, 2, 3, 6: batch mean 3, biased variance 3.5.
  const float inv_std = 1.0f / std::sqrt(3.5f);
  OpTester("BatchNormalization", 15)
      .AddAttribute("epsilon", 0.0f)
      .AddAttribute("training_mode", int64_t{1})
      .AddInput<float>("x", {2, 1, 2}, {1, 2, 3, 6})
      .AddInput<float>("scale", {1}, {1})
      .AddInput<float>("b", {1}, {0})
      .AddInput<float>("mean", {1}, {0})
      .AddInput<float>("var", {1}, {1})
      .AddOutput<float>("y", {2, 1, 2}, {-2 * inv_std, -inv_std, 0, 3 * inv_std})
      .AddOutput<float>("running_mean", {1}, {0.3f})  // 0 * 0.9 + 3 * 0.1
      .AddOutput<float>("running_var", {1}, {1.25f})  // 1 * 0.9 + 3.5 * 0.1
      .Run();
}

TEST(BatchNormalizationTest, TrainingStatisticsStayAccurateForLargeMeansAndLongRows) {
  // Values 5000 + (i % 7) over rows longer than one accumulation chunk: a naive float
  // E[x^2] - E[x]^2 would lose the variance (about 4) entirely next to x^2 = 2.5e7.
  const int64_t row = 1500;
  std::vector<float> x(2 * row);
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = 5000.0f + static_cast<float>(i % 7);
    sum += x[i];
  }
  const double mean = sum / static_cast<double>(x.size());
  double squares = 0;
  for (float v : x) squares += (v - mean) * (v - mean);
  const double var = squares / static_cast<double>(x.size());
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = static_cast<float>((x[i] - mean) / std::sqrt(var));
  OpTester("BatchNormalization", 15)
      .AddAttribute("epsilon", 0.0f)
      .AddAttribute("training_mode", int64_t{1})
      .AddAttribute("momentum", 0.0f)
      .AddInput<float>("x", {2, 1, row}, x)
      .AddInput<float>("scale", {1}, {1})
      .AddInput<float>("b", {1}, {0})
      .AddInput<float>("mean", {1}, {0})
      .AddInput<float>("var", {1}, {1})
      .AddOutput<float>("y", {2, 1, row}, y)
      .AddOutput<float>("running_mean", {1}, {static_cast<float>(mean)})
      .AddOutput<float>("running_var", {1}, {static_cast<float>(var)})
      .SetTolerance(1e-5, 1e-5)
      .Run();
}

// ChannelsLastBatchNormalization (X [N, H, W, C]) against the formulas in float64 per channel c = i % C, training
// and inference mode: channel counts of one vector of lanes, one and a tail, and less than one; every third channel
// near 5000 (a float E[x^2] - E[x]^2 would lose its variance).
// `matrix`: the plain BatchNormalization (opset 15) on the same values as [rows, C], BatchNorm1d after a Linear,
// which runs the same rows-of-channels kernel.
void ExpectChannelsLastBatchNormMatchesFloat64(int64_t channels, bool matrix = false) {
  const int64_t kBatch = 2, kHeight = 29, kWidth = 33;
  const int64_t rows = kBatch * kHeight * kWidth;
  std::vector<float> x(rows * channels), scale(channels), bias(channels), mean_in(channels), var_in(channels);
  for (int64_t i = 0; i < rows * channels; ++i) {
    x[i] = (i % channels % 3 == 1 ? 5000.0f : 0.0f) + static_cast<float>((i * 7919) % 13) * 0.25f;
  }
  for (int64_t c = 0; c < channels; c += 3) x[c] += 3000.0f;  // a first value far out: the statistics' shift
  for (int64_t c = 0; c < channels; ++c) {
    scale[c] = 1.0f + 0.1f * static_cast<float>(c);
    bias[c] = 0.5f - 0.05f * static_cast<float>(c);
    mean_in[c] = 0.25f * static_cast<float>(c);
    var_in[c] = 1.0f + 0.5f * static_cast<float>(c);
  }
  const double epsilon = 1e-5, momentum = 0.9;
  std::vector<double> mean(channels, 0.0), var(channels, 0.0);
  for (int64_t i = 0; i < rows * channels; ++i) mean[i % channels] += x[i] / static_cast<double>(rows);
  for (int64_t i = 0; i < rows * channels; ++i) {
    const double d = x[i] - mean[i % channels];
    var[i % channels] += d * d / static_cast<double>(rows);
  }
  std::vector<float> y(x.size()), y_inference(x.size()), running_mean(channels), running_var(channels);
  for (int64_t i = 0; i < rows * channels; ++i) {
    const int64_t c = i % channels;
    y[i] = static_cast<float>((x[i] - mean[c]) / std::sqrt(var[c] + epsilon) * scale[c] + bias[c]);
    y_inference[i] = static_cast<float>((x[i] - mean_in[c]) / std::sqrt(var_in[c] + epsilon) * scale[c] + bias[c]);
  }
  for (int64_t c = 0; c < channels; ++c) {
    running_mean[c] = static_cast<float>(mean_in[c] * momentum + mean[c] * (1 - momentum));
    running_var[c] = static_cast<float>(var_in[c] * momentum + var[c] * (1 - momentum));
  }
  const std::vector<int64_t> shape =
      matrix ? std::vector<int64_t>{rows, channels} : std::vector<int64_t>{kBatch, kHeight, kWidth, channels};
  auto tester = [&] {
    return matrix ? OpTester("BatchNormalization", 15)
                  : OpTester("ChannelsLastBatchNormalization", kTraindTrainingVersion, kTraindTrainingDomain);
  };
  tester()
      .AddAttribute("epsilon", static_cast<float>(epsilon))
      .AddAttribute("momentum", static_cast<float>(momentum))
      .AddAttribute("training_mode", int64_t{1})
      .AddInput<float>("x", shape, x)
      .AddInput<float>("scale", {channels}, scale)
      .AddInput<float>("b", {channels}, bias)
      .AddInput<float>("mean", {channels}, mean_in)
      .AddInput<float>("var", {channels}, var_in)
      .AddOutput<float>("y", shape, y)
      .AddOutput<float>("running_mean", {channels}, running_mean)
      .AddOutput<float>("running_var", {channels}, running_var)
      .SetTolerance(1e-5, 1e-4)
      .Run();
  tester()
      .AddAttribute("epsilon", static_cast<float>(epsilon))
      .AddInput<float>("x", shape, x)
      .AddInput<float>("scale", {channels}, scale)
      .AddInput<float>("b", {channels}, bias)
      .AddInput<float>("mean", {channels}, mean_in)
      .AddInput<float>("var", {channels}, var_in)
      .AddOutput<float>("y", shape, y_inference)
      .SetTolerance(1e-5, 1e-4)
      .Run();
}

TEST(BatchNormalizationTest, ChannelsLastMatchesFloat64) {
  ExpectChannelsLastBatchNormMatchesFloat64(16);
  ExpectChannelsLastBatchNormMatchesFloat64(21);
  ExpectChannelsLastBatchNormMatchesFloat64(5);
}

TEST(BatchNormalizationTest, MatrixInputMatchesFloat64) {
  ExpectChannelsLastBatchNormMatchesFloat64(16, /*matrix=*/true);
  ExpectChannelsLastBatchNormMatchesFloat64(21, /*matrix=*/true);
  ExpectChannelsLastBatchNormMatchesFloat64(5, /*matrix=*/true);
}

TEST(BatchNormalizationTest, ChannelsLastRefusesWhatBatchNormalizationRefuses) {
  auto code = [](OpTester& tester) { return tester.RunRaw().status().code(); };
  OpTester wrong_scale("ChannelsLastBatchNormalization", kTraindTrainingVersion, kTraindTrainingDomain);
  wrong_scale.AddInput<float>("x", {1, 2, 2, 3}, std::vector<float>(12, 1.0f))
      .AddInput<float>("scale", {2}, {1, 1})
      .AddInput<float>("b", {3}, {0, 0, 0})
      .AddInput<float>("mean", {3}, {0, 0, 0})
      .AddInput<float>("var", {3}, {1, 1, 1})
      .AddOutput<float>("y", {1, 2, 2, 3}, std::vector<float>(12, 0.0f));
  EXPECT_EQ(code(wrong_scale), absl::StatusCode::kInvalidArgument);
  OpTester bad_mode("ChannelsLastBatchNormalization", kTraindTrainingVersion, kTraindTrainingDomain);
  bad_mode.AddAttribute("training_mode", int64_t{2})
      .AddInput<float>("x", {1, 1, 1, 1}, {1})
      .AddInput<float>("scale", {1}, {1})
      .AddInput<float>("b", {1}, {0})
      .AddInput<float>("mean", {1}, {0})
      .AddInput<float>("var", {1}, {1})
      .AddOutput<float>("y", {1, 1, 1, 1}, {0});
  EXPECT_EQ(code(bad_mode), absl::StatusCode::kInvalidArgument);
}

TEST(BatchNormalizationTest, LegacyOpset6IsTestAndPerActivationStatistics) {
  // spatial=0: one statistic per (channel, position), parameters shaped [C, L].
  OpTester("BatchNormalization", 6)
      .AddAttribute("is_test", int64_t{1})
      .AddAttribute("spatial", int64_t{0})
      .AddAttribute("epsilon", 0.0f)
      .AddInput<float>("x", {1, 2, 2}, {5, 5, 5, 5})
      .AddInput<float>("scale", {2, 2}, {1, 1, 1, 1})
      .AddInput<float>("b", {2, 2}, {0, 0, 0, 0})
      .AddInput<float>("mean", {2, 2}, {0, 1, 2, 3})
      .AddInput<float>("var", {2, 2}, {1, 1, 1, 1})
      .AddOutput<float>("y", {1, 2, 2}, {5, 4, 3, 2})
      .Run();
}

OpTester BatchNormOneChannel(int opset) {
  OpTester tester("BatchNormalization", opset);
  tester.AddInput<float>("x", {1, 1, 1}, {1})
      .AddInput<float>("scale", {1}, {1})
      .AddInput<float>("b", {1}, {0})
      .AddInput<float>("mean", {1}, {0})
      .AddInput<float>("var", {1}, {1})
      .AddOutput<float>("y", {1, 1, 1}, {1});
  return tester;
}

TEST(BatchNormalizationTest, UnsupportedModesAndBadAttributes) {
  auto code = [](OpTester tester) { return tester.RunRaw().status().code(); };
  EXPECT_EQ(code(BatchNormOneChannel(6).AddAttribute("is_test", int64_t{0})), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(code(BatchNormOneChannel(9).AddOutput<float>("out_mean", {1}, {0}).AddOutput<float>("out_var", {1}, {1})),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(code(BatchNormOneChannel(15).AddAttribute("training_mode", int64_t{2})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(BatchNormOneChannel(15).AddOutput<float>("out_mean", {1}, {0}).AddOutput<float>("out_var", {1}, {1})),
            absl::StatusCode::kInvalidArgument);  // Running stats need training_mode=1.
  EXPECT_EQ(code(BatchNormOneChannel(15).AddAttribute("epsilon", -1.0f)), absl::StatusCode::kInvalidArgument);
  // Parameters with the wrong channel count.
  EXPECT_EQ(code(OpTester("BatchNormalization", 15)
                     .AddInput<float>("x", {1, 2}, {1, 2})
                     .AddInput<float>("scale", {1}, {1})
                     .AddInput<float>("b", {2}, {0, 0})
                     .AddInput<float>("mean", {2}, {0, 0})
                     .AddInput<float>("var", {2}, {1, 1})
                     .AddOutput<float>("y", {1, 2}, {1, 2})),
            absl::StatusCode::kInvalidArgument);
}

TEST(InstanceNormalizationTest, PerImagePerChannelStatistics) {
  // Image 0 channel 0 holds 1, 3 (mean 2, variance 1); channel 1 is constant (variance 0).
  const float eps = 1e-5f;
  const float a = 1.0f / std::sqrt(1.0f + eps);
  OpTester("InstanceNormalization", 6)
      .AddInput<float>("x", {2, 2, 2}, {1, 3, 2, 2, 0, 4, 7, 9})
      .AddInput<float>("scale", {2}, {2, 1})
      .AddInput<float>("b", {2}, {1, 5})
      .AddOutput<float>("y", {2, 2, 2},
                        {1 - 2 * a, 1 + 2 * a, 5, 5, 1 - 2 * std::sqrt(4 / (4 + eps)), 1 + 2 * std::sqrt(4 / (4 + eps)),
                         5 - a, 5 + a})
      .Run();
  EXPECT_EQ(OpTester("InstanceNormalization", 6)
                .AddInput<float>("x", {1, 2, 1}, {1, 2})
                .AddInput<float>("scale", {1}, {1})
                .AddInput<float>("b", {2}, {0, 0})
                .AddOutput<float>("y", {1, 2, 1}, {0, 0})
                .RunRaw()
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LayerNormalizationTest, LastAxisWithMeanAndInvStdDevOutputs) {
  // Rows [1, 3] (mean 2, std 1) and [2, 6] (mean 4, std 2) both normalise to [-1, 1].
  OpTester("LayerNormalization", 17)
      .AddAttribute("epsilon", 0.0f)
      .AddInput<float>("x", {2, 2}, {1, 3, 2, 6})
      .AddInput<float>("scale", {2}, {1, 2})
      .AddInput<float>("b", {2}, {0, 1})
      .AddOutput<float>("y", {2, 2}, {-1, 3, -1, 3})
      .AddOutput<float>("mean", {2, 1}, {2, 4})
      .AddOutput<float>("inv_std", {2, 1}, {1, 0.5})
      .Run();
}

// Float rows against float64: some far from zero (mean 1000, deviation 1), some whose first value is far out (the
// one-pass statistics are shifted by a row's first value and must fall back to a second pass around the mean), row
// lengths off the vector width. Y, Mean and InvStdDev within a few float ulps of the float64 values.
TEST(LayerNormalizationTest, FloatRowsFarFromZeroMatchFloat64) {
  for (const int64_t row : {int64_t{128}, int64_t{135}}) {
    const int64_t rows = 40;
    std::mt19937 generator(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(rows * row), scale(row), bias(row);
    for (int64_t r = 0; r < rows; ++r) {
      const float offset = r % 3 == 1 ? 1000.0f : 0.0f;
      for (int64_t i = 0; i < row; ++i) x[r * row + i] = offset + normal(generator);
      if (r % 4 == 2) x[r * row] = offset + 40.0f;
    }
    for (int64_t i = 0; i < row; ++i) {
      scale[i] = 1.0f + 0.5f * normal(generator);
      bias[i] = normal(generator);
    }
    const double epsilon = 1e-5;
    std::vector<float> y(x.size()), means(rows), inv_stds(rows);
    for (int64_t r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (int64_t i = 0; i < row; ++i) mean += x[r * row + i];
      mean /= static_cast<double>(row);
      for (int64_t i = 0; i < row; ++i) var += (x[r * row + i] - mean) * (x[r * row + i] - mean);
      const double inv = 1.0 / std::sqrt(var / static_cast<double>(row) + epsilon);
      for (int64_t i = 0; i < row; ++i) {
        y[r * row + i] = static_cast<float>((x[r * row + i] - mean) * inv * scale[i] + bias[i]);
      }
      means[r] = static_cast<float>(mean);
      inv_stds[r] = static_cast<float>(inv);
    }
    OpTester("LayerNormalization", 17)
        .AddAttribute("epsilon", static_cast<float>(epsilon))
        .AddInput<float>("x", {rows, row}, x)
        .AddInput<float>("scale", {row}, scale)
        .AddInput<float>("b", {row}, bias)
        .AddOutput<float>("y", {rows, row}, y)
        .AddOutput<float>("mean", {rows, 1}, means)
        .AddOutput<float>("inv_std", {rows, 1}, inv_stds)
        .SetTolerance(2e-6, 2e-6)
        .Run();
  }
}

TEST(LayerNormalizationTest, AxisZeroScalarScaleNoBiasDouble) {
  // All four values together: mean 3, variance 3.5.
  const double inv_std = 1 / std::sqrt(3.5);
  OpTester("LayerNormalization", 17)
      .AddAttribute("axis", int64_t{0})
      .AddAttribute("epsilon", 0.0f)
      .AddInput<double>("x", {2, 2}, {1, 2, 3, 6})
      .AddInput<double>("scale", {1}, {2})
      .AddOutput<double>("y", {2, 2}, {-4 * inv_std, -2 * inv_std, 0, 6 * inv_std})
      .Run();
}

TEST(LayerNormalizationTest, BadAxisScaleAndStashType) {
  auto code = [](OpTester tester) { return tester.RunRaw().status().code(); };
  EXPECT_EQ(code(OpTester("LayerNormalization", 17)
                     .AddAttribute("axis", int64_t{2})
                     .AddInput<float>("x", {1, 2}, {1, 2})
                     .AddInput<float>("scale", {2}, {1, 1})
                     .AddOutput<float>("y", {1, 2}, {-1, 1})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(OpTester("LayerNormalization", 17)
                     .AddInput<float>("x", {1, 2}, {1, 2})
                     .AddInput<float>("scale", {3}, {1, 1, 1})
                     .AddOutput<float>("y", {1, 2}, {-1, 1})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(OpTester("LayerNormalization", 17)
                     .AddAttribute("stash_type", int64_t{11})
                     .AddInput<float>("x", {1, 2}, {1, 2})
                     .AddInput<float>("scale", {2}, {1, 1})
                     .AddOutput<float>("y", {1, 2}, {-1, 1})),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace traind::engine
