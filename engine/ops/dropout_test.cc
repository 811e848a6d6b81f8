#include <limits>

#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

const std::vector<float> kX = {1, 2, 3, 4, 5, 6};

TEST(DropoutTest, InferenceIsTheIdentityWithAnAllTrueMask) {
  OpTester("Dropout", 13).AddInput<float>("x", {2, 3}, kX).AddOutput<float>("y", {2, 3}, kX).Run();
  OpTester("Dropout", 12)
      .AddInput<float>("x", {2, 3}, kX)
      .AddInput<float>("ratio", {}, {0.9f})
      .AddInput<uint8_t>("training_mode", {}, {0}, DataType::kBool)
      .AddOutput<float>("y", {2, 3}, kX)
      .AddOutput<uint8_t>("mask", {2, 3}, {1, 1, 1, 1, 1, 1}, DataType::kBool)
      .Run();
  OpTester("Dropout", 10)
      .AddAttribute("ratio", 0.3f)
      .AddInput<double>("x", {2}, {1, 2})
      .AddOutput<double>("y", {2}, {1, 2})
      .AddOutput<uint8_t>("mask", {2}, {1, 1}, DataType::kBool)
      .Run();
  // Opsets 7-9 type the mask like the data.
  OpTester("Dropout", 7)
      .AddInput<float>("x", {2}, {1, 2})
      .AddOutput<float>("y", {2}, {1, 2})
      .AddOutput<float>("mask", {2}, {1, 1})
      .Run();
}

TEST(DropoutTest, TrainingMaskMatchesNumpysSeededUniform) {
  // numpy: np.random.seed(3); np.random.uniform(0, 1, 6) =
  //   [0.5508, 0.7081, 0.2909, 0.5108, 0.8929, 0.8963]; kept where >= 0.6; scale 1 / 0.4.
  for (int run = 0; run < 2; ++run) {  // Same seed, same mask on every run.
    OpTester("Dropout", 13)
        .AddAttribute("seed", int64_t{3})
        .AddInput<float>("x", {2, 3}, kX)
        .AddInput<float>("ratio", {}, {0.6f})
        .AddInput<uint8_t>("training_mode", {}, {1}, DataType::kBool)
        .AddOutput<float>("y", {2, 3}, {0, 5, 0, 0, 12.5f, 15})
        .AddOutput<uint8_t>("mask", {2, 3}, {0, 1, 0, 0, 1, 1}, DataType::kBool)
        .Run();
  }
  // Ratio 0 in training keeps everything unscaled.
  OpTester("Dropout", 13)
      .AddInput<float>("x", {2}, {1, 2})
      .AddInput<float>("ratio", {}, {0.0f})
      .AddInput<uint8_t>("training_mode", {}, {1}, DataType::kBool)
      .AddOutput<float>("y", {2}, {1, 2})
      .AddOutput<uint8_t>("mask", {2}, {1, 1}, DataType::kBool)
      .Run();
}

TEST(DropoutTest, UnseededTrainingKeepsOrZeroesEachElement) {
  std::vector<float> ones(1000, 1.0f);
  auto result = OpTester("Dropout", 13)
                    .AddInput<float>("x", {1000}, ones)
                    .AddInput<float>("ratio", {}, {0.5f})
                    .AddInput<uint8_t>("training_mode", {}, {1}, DataType::kBool)
                    .AddOutput<float>("y", {1000}, ones)
                    .AddOutput<uint8_t>("mask", {1000}, std::vector<uint8_t>(1000), DataType::kBool)
                    .RunRaw();
  ASSERT_TRUE(result.ok()) << result.status();
  const float* y = (*result)[0].data<float>();
  const uint8_t* mask = (*result)[1].data<uint8_t>();
  int kept = 0;
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(y[i], mask[i] ? 2.0f : 0.0f) << i;
    kept += mask[i];
  }
  EXPECT_GT(kept, 400);  // Binomial(1000, 0.5): outside [400, 600] has probability ~1e-10.
  EXPECT_LT(kept, 600);
}

TEST(DropoutTest, BadRatios) {
  auto input_ratio = OpTester("Dropout", 13)
                         .AddInput<float>("x", {1}, {1})
                         .AddInput<float>("ratio", {}, {1.0f})
                         .AddInput<uint8_t>("training_mode", {}, {1}, DataType::kBool)
                         .AddOutput<float>("y", {1}, {0})
                         .RunRaw();
  EXPECT_EQ(input_ratio.status().code(), absl::StatusCode::kInvalidArgument);
  auto attribute_ratio = OpTester("Dropout", 10)
                             .AddAttribute("ratio", -0.5f)
                             .AddInput<float>("x", {1}, {1})
                             .AddOutput<float>("y", {1}, {1})
                             .RunRaw();
  ASSERT_FALSE(attribute_ratio.ok());
  EXPECT_NE(attribute_ratio.status().message().find("ratio"), std::string::npos);
}

}  // namespace
}  // namespace traind::engine
