#include "engine/training/optimizer.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace traind::engine {
namespace {

// Values from torch.optim.AdamW / SGD (PyTorch 1.13) on p = [1, -2], g = [0.5, 0.25], two steps with the same
// gradient, lr 0.1, weight decay 0.01 (AdamW) and momentum 0.9 Nesterov (SGD); see the derivations inline.
TEST(OptimizerTest, AdamWMatchesTheClosedFormOfTheFirstStep) {
  Tensor p = *Tensor::FromVector<float>({2}, std::vector<float>{1.0f, -2.0f});
  Tensor g = *Tensor::FromVector<float>({2}, std::vector<float>{0.5f, 0.25f});
  std::map<std::string, Tensor> state;
  std::vector<ParameterUpdate> updates = {{&p, &g, &state}};
  AdamWOptions options;
  options.lr = 0.1f;
  options.weight_decay = 0.01f;
  ASSERT_TRUE(AdamWStep(options, 1, updates).ok());
  // Step 1: m/(1-b1) = g, sqrt(v/(1-b2)) = |g|: p = p*(1 - lr*wd) - lr * sign(g) (up to eps).
  EXPECT_NEAR(p.data<float>()[0], 1.0f * 0.999f - 0.1f, 1e-6);
  EXPECT_NEAR(p.data<float>()[1], -2.0f * 0.999f - 0.1f, 1e-6);
  EXPECT_EQ(state.count("momentum0"), 1u);
  EXPECT_EQ(state.count("momentum1"), 1u);
}

TEST(OptimizerTest, SgdNesterovFollowsTorchsRecurrence) {
  Tensor p = *Tensor::FromVector<float>({1}, std::vector<float>{1.0f});
  Tensor g = *Tensor::FromVector<float>({1}, std::vector<float>{0.5f});
  std::map<std::string, Tensor> state;
  std::vector<ParameterUpdate> updates = {{&p, &g, &state}};
  SgdOptions options;
  options.lr = 0.1f;
  options.momentum = 0.9f;
  options.nesterov = true;
  ASSERT_TRUE(SgdStep(options, 1, updates).ok());
  // buf = 0.5; d = 0.5 + 0.9*0.5 = 0.95; p = 1 - 0.095
  EXPECT_NEAR(p.data<float>()[0], 0.905f, 1e-6);
  ASSERT_TRUE(SgdStep(options, 2, updates).ok());
  // buf = 0.9*0.5 + 0.5 = 0.95; d = 0.5 + 0.9*0.95 = 1.355; p = 0.905 - 0.1355
  EXPECT_NEAR(p.data<float>()[0], 0.7695f, 1e-6);
  options.dampening = 0.5f;
  EXPECT_EQ(SgdStep(options, 3, updates).code(), absl::StatusCode::kInvalidArgument);
}

TEST(OptimizerTest, NonFiniteGradientsAreDetectedAndBadInputsRefused) {
  Tensor p = *Tensor::FromVector<float>({2}, std::vector<float>{1.0f, 2.0f});
  Tensor g = *Tensor::FromVector<float>({2}, std::vector<float>{0.5f, std::numeric_limits<float>::quiet_NaN()});
  std::map<std::string, Tensor> state;
  std::vector<ParameterUpdate> updates = {{&p, &g, &state}};
  EXPECT_FALSE(AllFinite(updates));
  Tensor wrong = *Tensor::FromVector<float>({3}, std::vector<float>{1, 2, 3});
  std::vector<ParameterUpdate> mismatched = {{&p, &wrong, &state}};
  EXPECT_EQ(AdamWStep(AdamWOptions(), 1, mismatched).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AdamWStep(AdamWOptions(), 0, updates).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace traind::engine
