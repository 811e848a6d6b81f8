#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

TEST(SumMeanTest, ThreeInputsBroadcast) {
  // [2,1] + [3] + scalar -> [2,3].
  OpTester("Sum", 13)
      .AddInput<float>("a", {2, 1}, {1, 2})
      .AddInput<float>("b", {3}, {10, 20, 30})
      .AddInput<float>("c", {}, {100})
      .AddOutput<float>("y", {2, 3}, {111, 121, 131, 112, 122, 132})
      .Run();
  OpTester("Mean", 13)
      .AddInput<double>("a", {2, 1}, {1, 2})
      .AddInput<double>("b", {3}, {10, 20, 30})
      .AddInput<double>("c", {}, {100})
      .AddOutput<double>("y", {2, 3}, {111.0 / 3, 121.0 / 3, 131.0 / 3, 112.0 / 3, 122.0 / 3, 132.0 / 3})
      .Run();
}

TEST(SumMeanTest, OneInputAndSameShapes) {
  OpTester("Sum", 8).AddInput<float>("a", {2}, {1, 2}).AddOutput<float>("y", {2}, {1, 2}).Run();
  OpTester("Mean", 8).AddInput<float>("a", {2}, {1, 2}).AddOutput<float>("y", {2}, {1, 2}).Run();
  OpTester("Mean", 6)
      .AddInput<float>("a", {2}, {1, 2})
      .AddInput<float>("b", {2}, {2, 5})
      .AddOutput<float>("y", {2}, {1.5f, 3.5f})
      .Run();
}

TEST(SumMeanTest, IncompatibleShapesAndIntegers) {
  auto bad_shapes = OpTester("Sum", 13)
                        .AddInput<float>("a", {2}, {1, 2})
                        .AddInput<float>("b", {3}, {1, 2, 3})
                        .AddOutput<float>("y", {3}, {0, 0, 0})
                        .RunRaw();
  EXPECT_FALSE(bad_shapes.ok());
  auto integers = OpTester("Sum", 13)
                      .AddInput<int32_t>("a", {1}, {1})
                      .AddInput<int32_t>("b", {1}, {1})
                      .AddOutput<int32_t>("y", {1}, {2})
                      .RunRaw();
  EXPECT_FALSE(integers.ok());  // The schema allows float types only.
}

}  // namespace
}  // namespace traind::engine
