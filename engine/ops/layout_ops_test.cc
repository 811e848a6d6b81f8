#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

TEST(TransposeTest, DefaultReversesAndPermIsApplied) {
  OpTester("Transpose", 13).AddInput<float>("x", {2, 3}, {1, 2, 3, 4, 5, 6})
      .AddOutput<float>("y", {3, 2}, {1, 4, 2, 5, 3, 6}).Run();
  // [2,2,2] with perm (1,2,0): y[j][k][i] = x[i][j][k].
  OpTester("Transpose", 13).AddAttribute("perm", std::vector<int64_t>{1, 2, 0})
      .AddInput<int16_t>("x", {2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7})
      .AddOutput<int16_t>("y", {2, 2, 2}, {0, 4, 1, 5, 2, 6, 3, 7}).Run();
  auto bad = OpTester("Transpose", 13).AddAttribute("perm", std::vector<int64_t>{0, 0})
                 .AddInput<float>("x", {1, 1}, {1}).AddOutput<float>("y", {1, 1}, {1}).RunRaw();
  EXPECT_FALSE(bad.ok());
}

TEST(ConcatTest, InnerAxisAndEmptyInput) {
  OpTester("Concat", 13).AddAttribute("axis", int64_t{-1})
      .AddInput<float>("a", {2, 1}, {1, 2})
      .AddInput<float>("b", {2, 2}, {3, 4, 5, 6})
      .AddInput<float>("c", {2, 0}, {})
      .AddOutput<float>("y", {2, 3}, {1, 3, 4, 2, 5, 6}).Run();
  auto bad = OpTester("Concat", 13).AddAttribute("axis", int64_t{0})
                 .AddInput<float>("a", {1, 2}, {1, 2}).AddInput<float>("b", {1, 3}, {1, 2, 3})
                 .AddOutput<float>("y", {2, 2}, {0, 0, 0, 0}).RunRaw();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace traind::engine
