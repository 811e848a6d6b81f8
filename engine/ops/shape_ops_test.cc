#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

TEST(ReshapeTest, ZeroCopiesAndMinusOneInfers) {
  OpTester("Reshape", 14).AddInput<float>("x", {2, 3, 4}, std::vector<float>(24, 1.0f))
      .AddConstantInput<int64_t>("shape", {3}, {0, -1, 2})
      .AddOutput<float>("y", {2, 6, 2}, std::vector<float>(24, 1.0f)).Run();
  auto bad = OpTester("Reshape", 14).AddInput<float>("x", {2, 3}, std::vector<float>(6, 1.0f))
                 .AddConstantInput<int64_t>("shape", {1}, {5})
                 .AddOutput<float>("y", {5}, std::vector<float>(5, 1.0f)).RunRaw();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ReshapeTest, OutputAliasesInputBuffer) {
  OpTester tester("Reshape", 14);
  auto x = *Tensor::FromVector<float>({2, 2}, {1, 2, 3, 4});
  tester.AddInputTensor("x", x).AddConstantInput<int64_t>("shape", {1}, {4})
      .AddOutput<float>("y", {4}, {1, 2, 3, 4});
  auto outputs = tester.RunRaw();
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_EQ((*outputs)[0].raw_data(), x.raw_data());
}

TEST(FlattenSqueezeTest, Shapes) {
  OpTester("Flatten", 13).AddAttribute("axis", int64_t{-1})
      .AddInput<float>("x", {2, 3, 2}, std::vector<float>(12, 0.0f))
      .AddOutput<float>("y", {6, 2}, std::vector<float>(12, 0.0f)).Run();
  OpTester("Squeeze", 13).AddInput<float>("x", {1, 3, 1}, {1, 2, 3})
      .AddConstantInput<int64_t>("axes", {1}, {-1}).AddOutput<float>("y", {1, 3}, {1, 2, 3}).Run();
  OpTester("Squeeze", 11).AddInput<float>("x", {1, 3, 1}, {1, 2, 3})
      .AddOutput<float>("y", {3}, {1, 2, 3}).Run();
  OpTester("Unsqueeze", 11).AddAttribute("axes", std::vector<int64_t>{0, 3})
      .AddInput<float>("x", {3, 1}, {1, 2, 3}).AddOutput<float>("y", {1, 3, 1, 1}, {1, 2, 3}).Run();
  auto not_one = OpTester("Squeeze", 13).AddInput<float>("x", {2}, {1, 2})
                     .AddConstantInput<int64_t>("axes", {1}, {0})
                     .AddOutput<float>("y", {2}, {1, 2}).RunRaw();
  EXPECT_FALSE(not_one.ok());
}

TEST(ShapeTest, StartAndEnd) {
  OpTester("Shape", 15).AddInput<float>("x", {2, 3, 4}, std::vector<float>(24, 0.0f))
      .AddOutput<int64_t>("y", {3}, {2, 3, 4}).Run();
  OpTester("Shape", 15).AddAttribute("start", int64_t{-2}).AddAttribute("end", int64_t{10})
      .AddInput<float>("x", {2, 3, 4}, std::vector<float>(24, 0.0f))
      .AddOutput<int64_t>("y", {2}, {3, 4}).Run();
  OpTester("Identity", 13).AddInput<int32_t>("x", {2}, {7, 8})
      .AddOutput<int32_t>("y", {2}, {7, 8}).Run();
}

}  // namespace
}  // namespace traind::engine
