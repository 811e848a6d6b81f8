#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

// x[2,3] = [[1, 2, 3], [4, 5, 6]].
const std::vector<double> kX = {1, 2, 3, 4, 5, 6};

void ExpectCumSum(int64_t axis, int64_t exclusive, int64_t reverse, std::vector<double> expected) {
  OpTester("CumSum", 14)
      .AddAttribute("exclusive", exclusive)
      .AddAttribute("reverse", reverse)
      .AddInput<double>("x", {2, 3}, kX)
      .AddInput<int64_t>("axis", {}, {axis})
      .AddOutput<double>("y", {2, 3}, expected)
      .Run();
}

TEST(CumSumTest, EveryDirectionAlongBothAxes) {
  ExpectCumSum(1, 0, 0, {1, 3, 6, 4, 9, 15});
  ExpectCumSum(-1, 1, 0, {0, 1, 3, 0, 4, 9});
  ExpectCumSum(1, 0, 1, {6, 5, 3, 15, 11, 6});
  ExpectCumSum(1, 1, 1, {5, 3, 0, 11, 6, 0});
  ExpectCumSum(0, 0, 0, {1, 2, 3, 5, 7, 9});
  ExpectCumSum(0, 1, 1, {4, 5, 6, 0, 0, 0});
}

TEST(CumSumTest, IntegerValuesAndInt32Axis) {
  OpTester("CumSum", 11)
      .AddInput<int64_t>("x", {4}, {1, -2, 3, 10})
      .AddInput<int32_t>("axis", {1}, {0})
      .AddOutput<int64_t>("y", {4}, {1, -1, 2, 12})
      .Run();
}

TEST(CumSumTest, BadAxisAndAttributes) {
  auto bad_axis = OpTester("CumSum", 14)
                      .AddInput<float>("x", {2}, {1, 2})
                      .AddInput<int64_t>("axis", {}, {1})
                      .AddOutput<float>("y", {2}, {1, 3})
                      .RunRaw();
  EXPECT_EQ(bad_axis.status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_flag = OpTester("CumSum", 14)
                      .AddAttribute("reverse", int64_t{2})
                      .AddInput<float>("x", {2}, {1, 2})
                      .AddInput<int64_t>("axis", {}, {0})
                      .AddOutput<float>("y", {2}, {1, 3})
                      .RunRaw();
  ASSERT_FALSE(bad_flag.ok());
  EXPECT_NE(bad_flag.status().message().find("reverse"), std::string::npos);
}

}  // namespace
}  // namespace traind::engine
