#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

// x[2,4] = [[1, 4, 4, 2], [9, -1, 3, 9]].
const std::vector<float> kX = {1, 4, 4, 2, 9, -1, 3, 9};

TEST(TopKTest, LargestTiesKeepIndexOrder) {
  OpTester("TopK", 11)
      .AddInput<float>("x", {2, 4}, kX)
      .AddInput<int64_t>("k", {1}, {2})
      .AddOutput<float>("values", {2, 2}, {4, 4, 9, 9})
      .AddOutput<int64_t>("indices", {2, 2}, {1, 2, 0, 3})
      .Run();
}

TEST(TopKTest, SmallestAlongAnOuterAxis) {
  OpTester("TopK", 11)
      .AddAttribute("largest", int64_t{0})
      .AddInput<float>("x", {2, 4}, kX)
      .AddInput<int64_t>("k", {1}, {3})
      .AddOutput<float>("values", {2, 3}, {1, 2, 4, -1, 3, 9})
      .AddOutput<int64_t>("indices", {2, 3}, {0, 3, 1, 1, 2, 0})
      .Run();
  // axis 0 of [2,4]: one winner per column.
  OpTester("TopK", 11)
      .AddAttribute("axis", int64_t{0})
      .AddInput<int32_t>("x", {2, 4}, {1, 4, 4, 2, 9, -1, 3, 9})
      .AddInput<int64_t>("k", {1}, {1})
      .AddOutput<int32_t>("values", {1, 4}, {9, 4, 4, 9})
      .AddOutput<int64_t>("indices", {1, 4}, {1, 0, 0, 1})
      .Run();
}

TEST(TopKTest, Opset9TakesKFromTheAttribute) {
  OpTester("TopK", 9)
      .AddAttribute("k", int64_t{1})
      .AddInput<float>("x", {2, 4}, kX)
      .AddOutput<float>("values", {2, 1}, {4, 9})
      .AddOutput<int64_t>("indices", {2, 1}, {1, 0})
      .Run();
}

TEST(TopKTest, KZeroAndBadK) {
  OpTester("TopK", 11)
      .AddInput<float>("x", {2, 4}, kX)
      .AddInput<int64_t>("k", {1}, {0})
      .AddOutput<float>("values", {2, 0}, {})
      .AddOutput<int64_t>("indices", {2, 0}, {})
      .Run();
  auto too_big = OpTester("TopK", 11)
                     .AddInput<float>("x", {2, 4}, kX)
                     .AddInput<int64_t>("k", {1}, {5})
                     .AddOutput<float>("values", {2, 5}, std::vector<float>(10))
                     .AddOutput<int64_t>("indices", {2, 5}, std::vector<int64_t>(10))
                     .RunRaw();
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_flag = OpTester("TopK", 11)
                      .AddAttribute("sorted", int64_t{5})
                      .AddInput<float>("x", {2, 4}, kX)
                      .AddInput<int64_t>("k", {1}, {1})
                      .AddOutput<float>("values", {2, 1}, {4, 9})
                      .AddOutput<int64_t>("indices", {2, 1}, {1, 0})
                      .RunRaw();
  ASSERT_FALSE(bad_flag.ok());
  EXPECT_NE(bad_flag.status().message().find("sorted"), std::string::npos);
}

}  // namespace
}  // namespace traind::engine
