#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

TEST(PReluTest, NumpyBroadcastFromOpset7) {
  OpTester("PRelu", 16)
      .AddInput<float>("x", {2, 3}, {-1, -2, 3, 4, -5, 0})
      .AddInput<float>("slope", {3}, {0.5f, 2, 3})
      .AddOutput<float>("y", {2, 3}, {-0.5f, -4, 3, 4, -10, 0})
      .Run();
  OpTester("PRelu", 16)
      .AddInput<int32_t>("x", {2}, {-3, 3})
      .AddInput<int32_t>("slope", {1}, {2})
      .AddOutput<int32_t>("y", {2}, {-6, 3})
      .Run();
}

TEST(PReluTest, Opset6SlopeIsPerChannel) {
  // x [N=1, C=3, 2]: slope[c] applies to channel c (axis 1), not to the last axis.
  OpTester("PRelu", 6)
      .AddInput<float>("x", {1, 3, 2}, {-1, 1, -1, 1, -1, 1})
      .AddInput<float>("slope", {3}, {1, 2, 3})
      .AddOutput<float>("y", {1, 3, 2}, {-1, 1, -2, 1, -3, 1})
      .Run();
  // The same slope under opset 7+ broadcasts against the last axis, which does not fit.
  EXPECT_EQ(OpTester("PRelu", 7)
                .AddInput<float>("x", {1, 3, 2}, {-1, 1, -1, 1, -1, 1})
                .AddInput<float>("slope", {3}, {1, 2, 3})
                .AddOutput<float>("y", {1, 3, 2}, {0, 0, 0, 0, 0, 0})
                .RunRaw()
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PReluTest, SlopeMustNotGrowTheOutput) {
  EXPECT_EQ(OpTester("PRelu", 16)
                .AddInput<float>("x", {2}, {-1, 1})
                .AddInput<float>("slope", {3, 2}, {1, 1, 1, 1, 1, 1})
                .AddOutput<float>("y", {3, 2}, {0, 0, 0, 0, 0, 0})
                .RunRaw()
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace traind::engine
