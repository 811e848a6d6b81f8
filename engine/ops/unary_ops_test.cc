#include <cmath>
#include <vector>

#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

// Checks a float unary op against a reference function over a spread of inputs.
void CheckUnary(const char* op, float (*reference)(float), std::vector<float> inputs) {
  std::vector<float> expected;
  for (float x : inputs) expected.push_back(reference(x));
  OpTester(op, 13)
      .AddInput<float>("x", {static_cast<int64_t>(inputs.size())}, inputs)
      .AddOutput<float>("y", {static_cast<int64_t>(inputs.size())}, expected)
      .Run();
}

TEST(UnaryTest, MathFunctions) {
  CheckUnary("Sqrt", [](float x) { return std::sqrt(x); }, {0, 1, 4, 2.25f});
  CheckUnary("Exp", [](float x) { return std::exp(x); }, {-3, 0, 1, 5});
  CheckUnary("Log", [](float x) { return std::log(x); }, {0.5f, 1, 10});
  CheckUnary("Erf", [](float x) { return std::erf(x); }, {-2, 0, 0.5f, 3});
  CheckUnary("Tanh", [](float x) { return std::tanh(x); }, {-20, -1, 0, 1, 20});
  CheckUnary("Reciprocal", [](float x) { return 1 / x; }, {-4, 0.5f, 8});
  CheckUnary("Neg", [](float x) { return -x; }, {-4, 0, 8});
  CheckUnary("Abs", [](float x) { return std::fabs(x); }, {-4, 0, 8});
}

TEST(UnaryTest, ActivationsAreStableAtExtremes) {
  CheckUnary("Sigmoid", [](float x) { return 1 / (1 + std::exp(-x)); }, {-100, -1, 0, 1, 100});
  CheckUnary("Relu", [](float x) { return x > 0 ? x : 0; }, {-1, 0, 2});
  CheckUnary("Softplus", [](float x) { return static_cast<float>(std::log1p(std::exp(double(x)))); },
             {-50, -1, 0, 1, 50});
  OpTester("Softplus", 13).AddInput<float>("x", {1}, {1000}).AddOutput<float>("y", {1}, {1000}).Run();
}

TEST(UnaryTest, ParameterisedActivations) {
  OpTester("LeakyRelu", 16).AddAttribute("alpha", 0.1f)
      .AddInput<float>("x", {3}, {-2, 0, 3}).AddOutput<float>("y", {3}, {-0.2f, 0, 3}).Run();
  OpTester("Elu", 6 + 1).AddAttribute("alpha", 2.0f)
      .AddInput<float>("x", {2}, {-1, 2}).AddOutput<float>("y", {2}, {2 * (std::exp(-1.0f) - 1), 2}).Run();
  const float alpha = 1.67326319217681884765625f, gamma = 1.05070102214813232421875f;
  OpTester("Selu", 7).AddInput<float>("x", {2}, {-1, 2})
      .AddOutput<float>("y", {2}, {gamma * alpha * (std::exp(-1.0f) - 1), gamma * 2}).Run();
}

// Elu and Selu below 0 are alpha * (e^x - 1): computed as e^x rounded minus 1 they keep only e^x's rounding near
// 0 (Elu(-1e-5) came out 1.4e-3 off, relatively); PyTorch uses expm1. Within a few ulp of double here.
TEST(UnaryTest, EluAndSeluKeepSmallNegativeInputs) {
  const std::vector<float> x = {-1e-7f, -1e-5f, -3e-3f, -0.3f, -0.7f, -5.0f, -30.0f};
  std::vector<float> elu, selu;
  const double alpha = 1.67326319217681884765625, gamma = 1.05070102214813232421875;
  for (float v : x) {
    elu.push_back(static_cast<float>(std::expm1(static_cast<double>(v))));
    selu.push_back(static_cast<float>(gamma * alpha * std::expm1(static_cast<double>(v))));
  }
  const int64_t n = static_cast<int64_t>(x.size());
  OpTester("Elu", 6 + 1).AddInput<float>("x", {n}, x).AddOutput<float>("y", {n}, elu).SetTolerance(5e-7, 0).Run();
  OpTester("Selu", 7).AddInput<float>("x", {n}, x).AddOutput<float>("y", {n}, selu).SetTolerance(5e-7, 0).Run();
}

// Log over many magnitudes, subnormal and huge included, against double.
TEST(UnaryTest, LogOverEveryMagnitude) {
  const std::vector<float> x = {1e-45f, 1e-40f, 1e-30f, 1e-3f, 0.7f, 1.0f, 1.5f, 3e10f, 3e38f};
  std::vector<float> expected;
  for (float v : x) expected.push_back(static_cast<float>(std::log(static_cast<double>(v))));
  const int64_t n = static_cast<int64_t>(x.size());
  OpTester("Log", 13).AddInput<float>("x", {n}, x).AddOutput<float>("y", {n}, expected).SetTolerance(2e-7, 0).Run();
}

TEST(UnaryTest, IntegerAndBoolVariants) {
  OpTester("Abs", 13).AddInput<int8_t>("x", {3}, {-128, -3, 4})
      .AddOutput<int8_t>("y", {3}, {-128, 3, 4}).Run();  // Wraps like two's complement.
  OpTester("Neg", 13).AddInput<int64_t>("x", {2}, {5, -7}).AddOutput<int64_t>("y", {2}, {-5, 7}).Run();
  OpTester("Not", 1 + 6).AddInput<uint8_t>("x", {2}, {0, 1}, DataType::kBool)
      .AddOutput<uint8_t>("y", {2}, {1, 0}, DataType::kBool).Run();
}

TEST(UnaryTest, WrongAttributeTypeNamesTheAttribute) {
  auto result = OpTester("LeakyRelu", 16).AddAttribute("alpha", int64_t{1})
                    .AddInput<float>("x", {1}, {1}).AddOutput<float>("y", {1}, {1}).RunRaw();
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("alpha"), std::string::npos) << result.status();
  EXPECT_NE(result.status().message().find("LeakyRelu"), std::string::npos) << result.status();
}

}  // namespace
}  // namespace traind::engine
