// Expected values from numpy (float64): softmax = exp(x - max) / sum, log softmax = x - max - log(sum).
#include <cmath>
#include <limits>

#include "engine/model/traind_schemas.h"
#include "engine/testing/float64_reference.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;
using testing::RandomTensor;

const std::vector<double> kRowsX = {1, 2, 3, 1000, 1000, 1000};
const std::vector<double> kRowsSoftmax = {
    0.09003057317038043, 0.24472847105479767, 0.6652409557748218, 1.0 / 3, 1.0 / 3, 1.0 / 3};
const std::vector<double> kRowsLogSoftmax = {-2.4076059644443806, -1.4076059644443804, -0.40760596444438035,
                                             -1.0986122886681096, -1.0986122886681096, -1.0986122886681096};

std::vector<float> ToFloat(const std::vector<double>& values) {
  return std::vector<float>(values.begin(), values.end());
}

TEST(SoftmaxTest, LastAxisIsStableForLargeInputsFloatAndDouble) {
  OpTester("Softmax", 13)
      .AddInput<float>("x", {2, 3}, ToFloat(kRowsX))
      .AddOutput<float>("y", {2, 3}, ToFloat(kRowsSoftmax))
      .Run();
  OpTester("Softmax", 13).AddInput<double>("x", {2, 3}, kRowsX).AddOutput<double>("y", {2, 3}, kRowsSoftmax).Run();
  OpTester("LogSoftmax", 13)
      .AddInput<float>("x", {2, 3}, ToFloat(kRowsX))
      .AddOutput<float>("y", {2, 3}, ToFloat(kRowsLogSoftmax))
      .Run();
  OpTester("LogSoftmax", 13)
      .AddInput<double>("x", {2, 3}, kRowsX)
      .AddOutput<double>("y", {2, 3}, kRowsLogSoftmax)
      .Run();
}

// The float kernels against float64 on rows of 3 to 72 values drawn from [-10, 10), every axis, both conventions.
// Bounds: a log softmax is good to 4 ulp of 1 on the scale of log(sum) (oneDNN's logsoftmax, once used here, was
// 2.9e-6 off); a softmax's exp(x - max) inherits the rounding of x - max (half an ulp of 20 = 9.5e-7 relative) plus
// a few ulp.
TEST(SoftmaxTest, FloatKernelsAreWithinAFewUlpOfFloat64) {
  constexpr double kLogSoftmaxBound = 4 * 1.1920929e-7;
  constexpr double kSoftmaxBound = 9.5367432e-7 + 4 * 1.1920929e-7;
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    const bool log_softmax = std::string(op) == "LogSoftmax";
    for (int opset : {11, 13}) {
      for (int64_t axis : {0, 1, 2, -1}) {
        SCOPED_TRACE(std::string(op) + " opset " + std::to_string(opset) + " axis " + std::to_string(axis));
        const Tensor x = RandomTensor({3, 4, 6}, -10, 10, 5);
        OpTester test(op, opset);
        test.AddInputTensor("x", x).AddAttribute("axis", axis).AddOutputShape("y", DataType::kFloat32, {3, 4, 6});
        auto y = test.RunRaw();
        ASSERT_TRUE(y.ok()) << y.status();
        const double error =
            testing::MaxScaledError((*y)[0], testing::SoftmaxFloat64Reference(x, axis, opset, log_softmax),
                                    log_softmax ? 1.0 : 0.0);
        EXPECT_LE(error, log_softmax ? kLogSoftmaxBound : kSoftmaxBound);
      }
    }
  }
}

// Rows along the last axis (1000, 64, 37 and 5 classes: vectors of 16 and tails; 5 rows: a group of four and one)
// take the vectorised exp (softmax_slab.h): the same bounds against float64, log softmax with wide logits.
TEST(SoftmaxTest, LongLastAxisRowsAreWithinAFewUlpOfFloat64) {
  constexpr double kLogSoftmaxBound = 4 * 1.1920929e-7;
  constexpr double kSoftmaxBound = 9.5367432e-7 + 4 * 1.1920929e-7;
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    const bool log_softmax = std::string(op) == "LogSoftmax";
    for (int64_t classes : {1000, 64, 37, 5}) {
      SCOPED_TRACE(std::string(op) + " " + std::to_string(classes));
      // Softmax's bound is relative: x - max rounds to half an ulp of itself (1e-6 at 20), which exp turns into a
      // relative error, so its logits stay within [-10, 10] as in the test above.
      const double range = log_softmax ? 30 : 10;
      const Tensor x = RandomTensor({5, classes}, -range, range, 7);
      OpTester test(op, 13);
      test.AddInputTensor("x", x).AddAttribute("axis", int64_t{-1}).AddOutputShape("y", DataType::kFloat32,
                                                                                     {5, classes});
      auto y = test.RunRaw();
      ASSERT_TRUE(y.ok()) << y.status();
      EXPECT_LE(testing::MaxScaledError((*y)[0], testing::SoftmaxFloat64Reference(x, -1, 13, log_softmax),
                                        log_softmax ? 1.0 : 0.0),
                log_softmax ? kLogSoftmaxBound : kSoftmaxBound);
    }
  }
}

// A NaN anywhere in a row makes the whole row NaN (PyTorch's log_softmax does the same, and a loss over it must
// come out non-finite); a -inf logit is a -inf log-probability (a probability of 0) and leaves the others finite.
TEST(SoftmaxTest, LongRowsPropagateNaNAndKeepMinusInfinity) {
  std::vector<float> x(2 * 40);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i % 17);
  x[23] = std::numeric_limits<float>::quiet_NaN();
  x[40 + 5] = -std::numeric_limits<float>::infinity();
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    SCOPED_TRACE(op);
    const bool log_softmax = std::string(op) == "LogSoftmax";
    OpTester test(op, 13);
    test.AddInput<float>("x", {2, 40}, x).AddOutputShape("y", DataType::kFloat32, {2, 40});
    auto y = test.RunRaw();
    ASSERT_TRUE(y.ok()) << y.status();
    const float* out = (*y)[0].data<float>();
    for (int i = 0; i < 40; ++i) EXPECT_TRUE(std::isnan(out[i])) << i;
    for (int i = 40; i < 80; ++i) {
      if (i == 45) {
        EXPECT_EQ(out[i], log_softmax ? -std::numeric_limits<float>::infinity() : 0.0f);
      } else {
        EXPECT_TRUE(std::isfinite(out[i])) << i;
      }
    }
  }
}

TEST(SoftmaxTest, Opset13NormalisesAlongOneInnerAxis) {
  const std::vector<double> x = {0, 1, 2, 3, 5, -1};
  const std::vector<double> softmax = {0.04742587317756678, 0.017986209962091555, 0.9525741268224334,
                                       0.9525741268224334,  0.9820137900379085,   0.04742587317756678};
  const std::vector<double> log_softmax = {-3.048587351573742,   -4.0181499279178094,   -0.04858735157374197,
                                           -0.04858735157374197, -0.018149927917809776, -3.048587351573742};
  for (int64_t axis : {0, -2}) {
    OpTester("Softmax", 13)
        .AddAttribute("axis", axis)
        .AddInput<float>("x", {2, 3}, ToFloat(x))
        .AddOutput<float>("y", {2, 3}, ToFloat(softmax))
        .Run();
  }
  OpTester("Softmax", 13)
      .AddAttribute("axis", int64_t{0})
      .AddInput<double>("x", {2, 3}, x)
      .AddOutput<double>("y", {2, 3}, softmax)
      .Run();
  OpTester("LogSoftmax", 13)
      .AddAttribute("axis", int64_t{0})
      .AddInput<float>("x", {2, 3}, ToFloat(x))
      .AddOutput<float>("y", {2, 3}, ToFloat(log_softmax))
      .Run();
  OpTester("LogSoftmax", 13)
      .AddAttribute("axis", int64_t{0})
      .AddInput<double>("x", {2, 3}, x)
      .AddOutput<double>("y", {2, 3}, log_softmax)
      .Run();
}

TEST(SoftmaxTest, BeforeOpset13TheInputIsCoercedTo2D) {
  // [2,2,2] with the default axis 1 normalises rows of 4, not along dim 1 alone.
  const std::vector<float> x = {0, 0.5f, 1, 1.5f, 2, 2.5f, 3, 3.5f};
  const std::vector<float> row = {0.10153632409155178f, 0.16740509727844333f, 0.2760043447065936f,
                                  0.45505423392341116f};
  std::vector<float> expected = row;
  expected.insert(expected.end(), row.begin(), row.end());
  OpTester("Softmax", 11).AddInput<float>("x", {2, 2, 2}, x).AddOutput<float>("y", {2, 2, 2}, expected).Run();
  OpTester("Softmax", 6)
      .AddInput<double>("x", {2, 2, 2}, std::vector<double>(x.begin(), x.end()))
      .AddOutput<double>("y", {2, 2, 2}, std::vector<double>(expected.begin(), expected.end()))
      .Run();
  // axis 0: the whole tensor is one row.
  OpTester("Softmax", 11)
      .AddAttribute("axis", int64_t{0})
      .AddInput<float>("x", {2, 2}, {0, 0, 0, 0})
      .AddOutput<float>("y", {2, 2}, {0.25f, 0.25f, 0.25f, 0.25f})
      .Run();
}

TEST(SoftmaxTest, WideInnerAxisCrossesBlocks) {
  // axis 0 of [2, 600]: 600 inner positions span three blocks of the strided loop.
  std::vector<double> x(1200), expected(1200);
  for (int i = 0; i < 600; ++i) {
    x[i] = i % 7;
    x[600 + i] = (i % 7) + 1;  // One larger: softmax = [1/(1+e), e/(1+e)] at every position.
    expected[i] = 1 / (1 + std::exp(1.0));
    expected[600 + i] = std::exp(1.0) / (1 + std::exp(1.0));
  }
  OpTester("Softmax", 13)
      .AddAttribute("axis", int64_t{0})
      .AddInput<double>("x", {2, 600}, x)
      .AddOutput<double>("y", {2, 600}, expected)
      .Run();
  OpTester("Softmax", 13)
      .AddAttribute("axis", int64_t{0})
      .AddInput<float>("x", {2, 600}, ToFloat(x))
      .AddOutput<float>("y", {2, 600}, ToFloat(expected))
      .Run();
}

TEST(HardmaxTest, FirstMaximumWinsAlongTheAxis) {
  OpTester("Hardmax", 13)
      .AddInput<float>("x", {2, 4}, {3, 1, 3, 0, -1, -5, -0.5f, -2})
      .AddOutput<float>("y", {2, 4}, {1, 0, 0, 0, 0, 0, 1, 0})
      .Run();
  OpTester("Hardmax", 13)
      .AddAttribute("axis", int64_t{0})
      .AddInput<double>("x", {3, 2}, {1, 9, 4, 9, 2, 0})
      .AddOutput<double>("y", {3, 2}, {0, 1, 1, 0, 0, 0})
      .Run();
  // Opset 11, axis 1 of [2,1,2]: rows of 2.
  OpTester("Hardmax", 11)
      .AddInput<float>("x", {2, 1, 2}, {0, 1, 7, 2})
      .AddOutput<float>("y", {2, 1, 2}, {0, 1, 1, 0})
      .Run();
}

TEST(SoftmaxTest, EmptyInputAndErrors) {
  OpTester("Softmax", 13).AddInput<float>("x", {0, 3}, {}).AddOutput<float>("y", {0, 3}, {}).Run();
  auto bad_axis = OpTester("Softmax", 13)
                      .AddAttribute("axis", int64_t{2})
                      .AddInput<float>("x", {2, 2}, {1, 2, 3, 4})
                      .AddOutput<float>("y", {2, 2}, {0, 0, 0, 0})
                      .RunRaw();
  EXPECT_EQ(bad_axis.status().code(), absl::StatusCode::kInvalidArgument) << bad_axis.status();
  auto bad_type = OpTester("LogSoftmax", 13)
                      .AddAttribute("axis", 1.0f)
                      .AddInput<float>("x", {1}, {1})
                      .AddOutput<float>("y", {1}, {0})
                      .RunRaw();
  ASSERT_FALSE(bad_type.ok());
  EXPECT_NE(bad_type.status().message().find("axis"), std::string::npos) << bad_type.status();
}

// SoftmaxGrad (Softmax's gradient rule emits it): dX = Y * (dY - sum(dY * Y)) against float64 sums, along the last
// axis (a row length that is not a multiple of the 16 lanes), a middle axis (strided normalisations) and over the
// trailing dims of opset 1-12's 2-D coercion; float and double.
std::vector<double> SoftmaxGradFloat64(const Tensor& dy, const Tensor& y, int64_t outer, int64_t n, int64_t inner) {
  std::vector<double> dx(static_cast<size_t>(outer * n * inner));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      double sum = 0;
      for (int64_t a = 0; a < n; ++a) {
        const int64_t at = (o * n + a) * inner + i;
        sum += double{dy.data<float>()[at]} * y.data<float>()[at];
      }
      for (int64_t a = 0; a < n; ++a) {
        const int64_t at = (o * n + a) * inner + i;
        dx[at] = y.data<float>()[at] * (dy.data<float>()[at] - sum);
      }
    }
  }
  return dx;
}

TEST(SoftmaxGradTest, MatchesFloat64OverEveryAxisConvention) {
  struct Case {
    Shape shape;
    int64_t axis;
    bool coerce_to_2d;
    int64_t outer, n, inner;
  };
  for (const Case& c : {Case{{3, 37}, -1, false, 3, 37, 1}, Case{{2, 5, 3}, 1, false, 2, 5, 3},
                        Case{{2, 3, 4}, 1, true, 2, 12, 1}, Case{{4, 64}, 1, false, 4, 64, 1}}) {
    SCOPED_TRACE(::testing::Message() << ShapeToString(c.shape) << " axis " << c.axis << " coerce " << c.coerce_to_2d);
    const Tensor dy = RandomTensor(c.shape, -1, 1, 3), y = RandomTensor(c.shape, 0, 1, 4);
    const std::vector<double> expected = SoftmaxGradFloat64(dy, y, c.outer, c.n, c.inner);
    OpTester test("SoftmaxGrad", kTraindTrainingVersion, kTraindTrainingDomain);
    test.AddInputTensor("dy", dy).AddInputTensor("y", y).AddAttribute("axis", c.axis)
        .AddAttribute("coerce_to_2d", int64_t{c.coerce_to_2d});
    test.AddOutput<float>("dx", c.shape, ToFloat(expected)).SetTolerance(1e-5, 1e-6).Run();
  }
  // double, and the shapes it refuses.
  OpTester("SoftmaxGrad", kTraindTrainingVersion, kTraindTrainingDomain)
      .AddInput<double>("dy", {1, 3}, {1, 0, 0})
      .AddInput<double>("y", {1, 3}, {0.5, 0.25, 0.25})
      .AddOutput<double>("dx", {1, 3}, {0.25, -0.125, -0.125})
      .Run();
  OpTester mismatched("SoftmaxGrad", kTraindTrainingVersion, kTraindTrainingDomain);
  mismatched.AddInputTensor("dy", RandomTensor({2, 3}, -1, 1, 1)).AddInputTensor("y", RandomTensor({3, 2}, 0, 1, 2));
  mismatched.AddOutputShape("dx", DataType::kFloat32, {3, 2});
  const absl::StatusOr<std::vector<Tensor>> refused = mismatched.RunRaw();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_NE(refused.status().message().find("must have Y's shape"), std::string::npos) << refused.status();
}

}  // namespace
}  // namespace traind::engine
