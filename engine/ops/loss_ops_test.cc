// Expected values hand-computed from the definition in loss_ops.cc (log softmax values from numpy).
#include <cmath>
#include <limits>

#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

// Log probabilities [N=2, C=3, d1=2]; -x[n, c, d] is easy to read off.
const std::vector<float> kLogProb = {-1, -2, -3, -4, -5, -6, -0.5f, -1.5f, -2.5f, -3.5f, -4.5f, -5.5f};
// Targets [2, 2] pick x[0,0,0] = -1, x[0,2,1] = -6, x[1,1,0] = -2.5, x[1,0,1] = -1.5.
const std::vector<int64_t> kTarget = {0, 2, 1, 0};

OpTester Nll(const std::string& reduction) {
  OpTester test("NegativeLogLikelihoodLoss", 13);
  test.AddAttribute("reduction", reduction);
  test.AddInput<float>("input", {2, 3, 2}, kLogProb);
  return test;
}

TEST(NegativeLogLikelihoodLossTest, Reductions) {
  Nll("none").AddInput<int64_t>("target", {2, 2}, kTarget).AddOutput<float>("loss", {2, 2}, {1, 6, 2.5f, 1.5f}).Run();
  Nll("sum").AddInput<int64_t>("target", {2, 2}, kTarget).AddOutput<float>("loss", {}, {11}).Run();
  Nll("mean").AddInput<int64_t>("target", {2, 2}, kTarget).AddOutput<float>("loss", {}, {2.75f}).Run();
}

TEST(NegativeLogLikelihoodLossTest, MeanWithWeightsDividesByTheAppliedWeights) {
  // w = [1, 2, 0.5]: losses 1*1, 0.5*6, 2*2.5, 1*1.5 = 10.5 over weights 1+0.5+2+1 = 4.5.
  Nll("mean")
      .AddInput<int32_t>("target", {2, 2}, {0, 2, 1, 0})
      .AddInput<float>("weight", {3}, {1, 2, 0.5f})
      .AddOutput<float>("loss", {}, {10.5f / 4.5f})
      .Run();
  // ignore_index 2 drops position (0, 1): 7.5 over 4.
  Nll("mean")
      .AddAttribute("ignore_index", int64_t{2})
      .AddInput<int64_t>("target", {2, 2}, kTarget)
      .AddInput<float>("weight", {3}, {1, 2, 0.5f})
      .AddOutput<float>("loss", {}, {1.875f})
      .Run();
  // Without weights the mean is over the positions that are not ignored: 5 / 3.
  Nll("mean")
      .AddAttribute("ignore_index", int64_t{2})
      .AddInput<int64_t>("target", {2, 2}, kTarget)
      .AddOutput<float>("loss", {}, {5.0f / 3})
      .Run();
}

TEST(NegativeLogLikelihoodLossTest, IgnoredTargetsMayBeOutOfRange) {
  Nll("none")
      .AddAttribute("ignore_index", int64_t{-1})
      .AddInput<int64_t>("target", {2, 2}, {-1, 2, 1, -1})
      .AddOutput<float>("loss", {2, 2}, {0, 6, 2.5f, 0})
      .Run();
  // Every position ignored: 0 / 0, NaN as in the ONNX reference.
  Nll("mean")
      .AddAttribute("ignore_index", int64_t{7})
      .AddInput<int64_t>("target", {2, 2}, {7, 7, 7, 7})
      .AddOutput<float>("loss", {}, {std::numeric_limits<float>::quiet_NaN()})
      .Run();
}

TEST(NegativeLogLikelihoodLossTest, Errors) {
  auto out_of_range = Nll("none")
                          .AddInput<int64_t>("target", {2, 2}, {0, 3, 0, 0})
                          .AddOutput<float>("loss", {2, 2}, {0, 0, 0, 0})
                          .RunRaw();
  EXPECT_EQ(out_of_range.status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_reduction =
      Nll("average").AddInput<int64_t>("target", {2, 2}, kTarget).AddOutput<float>("loss", {}, {0}).RunRaw();
  ASSERT_FALSE(bad_reduction.ok());
  EXPECT_NE(bad_reduction.status().message().find("reduction"), std::string::npos);
}

TEST(SoftmaxCrossEntropyLossTest, LossAndLogProb) {
  // scores [[1, 2, 3], [1, 1, 1]], labels [2, 0].
  const std::vector<float> log_prob = {-2.4076059644443806f, -1.4076059644443804f, -0.40760596444438035f,
                                       -1.0986122886681096f, -1.0986122886681096f, -1.0986122886681096f};
  OpTester("SoftmaxCrossEntropyLoss", 13)
      .AddInput<float>("scores", {2, 3}, {1, 2, 3, 1, 1, 1})
      .AddInput<int64_t>("labels", {2}, {2, 0})
      .AddOutput<float>("loss", {}, {(0.40760596444438035f + 1.0986122886681096f) / 2})
      .AddOutput<float>("log_prob", {2, 3}, log_prob)
      .Run();
  OpTester("SoftmaxCrossEntropyLoss", 12)
      .AddAttribute("reduction", std::string("none"))
      .AddInput<double>("scores", {2, 3}, {1, 2, 3, 1, 1, 1})
      .AddInput<int64_t>("labels", {2}, {2, 0})
      .AddInput<double>("weights", {3}, {3, 1, 2})
      .AddOutput<double>("loss", {2}, {2 * 0.40760596444438035, 3 * 1.0986122886681096})
      .Run();
}

TEST(SoftmaxCrossEntropyLossTest, ClassAxisWithTrailingDims) {
  // scores [1, 2, 2]: classes along axis 1, two positions; labels [1, 2] -> [[1, 0]].
  // Position 0: scores (0, ln 3) -> log_prob (ln 1/4, ln 3/4); position 1: (5, 5) -> ln 1/2 each.
  const float ln3 = std::log(3.0f);
  OpTester("SoftmaxCrossEntropyLoss", 13)
      .AddAttribute("reduction", std::string("sum"))
      .AddInput<float>("scores", {1, 2, 2}, {0, 5, ln3, 5})
      .AddInput<int64_t>("labels", {1, 2}, {1, 0})
      .AddOutput<float>("loss", {}, {-std::log(0.75f) - std::log(0.5f)})
      .AddOutput<float>("log_prob", {1, 2, 2}, {std::log(0.25f), std::log(0.5f), std::log(0.75f), std::log(0.5f)})
      .Run();
}

}  // namespace
}  // namespace traind::engine
