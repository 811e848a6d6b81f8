#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

TEST(ConstantTest, TensorAndScalarForms) {
  OpTester("Constant", 13).AddAttribute("value", *Tensor::FromVector<float>({2}, {1.5f, 2}))
      .AddOutput<float>("y", {2}, {1.5f, 2}).Run();
  OpTester("Constant", 13).AddAttribute("value_ints", std::vector<int64_t>{4, 5})
      .AddOutput<int64_t>("y", {2}, {4, 5}).Run();
  OpTester("Constant", 13).AddAttribute("value_float", 0.5f).AddOutput<float>("y", {}, {0.5f}).Run();
}

TEST(ConstantOfShapeTest, FillsWithValueOrZero) {
  OpTester("ConstantOfShape", 9).AddAttribute("value", *Tensor::FromVector<int32_t>({1}, {7}))
      .AddInput<int64_t>("shape", {2}, {2, 3})
      .AddOutput<int32_t>("y", {2, 3}, std::vector<int32_t>(6, 7)).Run();
  OpTester("ConstantOfShape", 9).AddInput<int64_t>("shape", {1}, {5})
      .AddOutput<float>("y", {5}, std::vector<float>(5, 0.0f)).Run();
  auto huge = OpTester("ConstantOfShape", 9)
                  .AddInput<int64_t>("shape", {2}, {int64_t{1} << 40, int64_t{1} << 40})
                  .AddOutput<float>("y", {1}, {0}).RunRaw();
  EXPECT_FALSE(huge.ok());
}

}  // namespace
}  // namespace traind::engine
