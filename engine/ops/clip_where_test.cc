#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

TEST(ClipTest, BoundsFromInputsSinceOpset11) {
  OpTester("Clip", 13).AddInput<float>("x", {4}, {-5, 0, 2, 9}).AddInput<float>("min", {}, {-1})
      .AddInput<float>("max", {}, {3}).AddOutput<float>("y", {4}, {-1, 0, 2, 3}).Run();
  OpTester("Clip", 13).AddInput<int32_t>("x", {3}, {-5, 0, 9}).AddMissingInput()
      .AddInput<int32_t>("max", {}, {3}).AddOutput<int32_t>("y", {3}, {-5, 0, 3}).Run();
  // min > max: every element becomes max (numpy.clip).
  OpTester("Clip", 13).AddInput<float>("x", {2}, {-5, 9}).AddInput<float>("min", {}, {4})
      .AddInput<float>("max", {}, {2}).AddOutput<float>("y", {2}, {2, 2}).Run();
}

TEST(ClipTest, BoundsFromAttributesBeforeOpset11) {
  OpTester("Clip", 7).AddAttribute("min", -1.0f).AddAttribute("max", 1.0f)
      .AddInput<float>("x", {3}, {-5, 0.5f, 9}).AddOutput<float>("y", {3}, {-1, 0.5f, 1}).Run();
}

TEST(WhereTest, ThreeWayBroadcast) {
  OpTester("Where", 16)
      .AddInput<uint8_t>("c", {2, 1}, {1, 0}, DataType::kBool)
      .AddInput<int64_t>("x", {3}, {1, 2, 3})
      .AddInput<int64_t>("y", {}, {-1})
      .AddOutput<int64_t>("z", {2, 3}, {1, 2, 3, -1, -1, -1})
      .Run();
}

}  // namespace
}  // namespace traind::engine
