// Expected values are hand-computed or from numpy (float64) over the same inputs.
#include <cmath>
#include <limits>

#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

// x[3,2,2] used by most cases below.
const std::vector<float> kX = {1, 2, 3, 4, 5, 6, 7, 8, -1, 0.5f, 2, -3};

TEST(ReduceTest, EveryReducerOverOneAxisGroup) {
  OpTester("ReduceMean", 13)
      .AddAttribute("axes", std::vector<int64_t>{1})
      .AddInput<float>("x", {3, 2, 2}, kX)
      .AddOutput<float>("y", {3, 1, 2}, {2, 3, 6, 7, 0.5f, -1.25f})
      .Run();
  OpTester("ReduceProd", 13)
      .AddAttribute("axes", std::vector<int64_t>{-1})
      .AddAttribute("keepdims", int64_t{0})
      .AddInput<float>("x", {3, 2, 2}, kX)
      .AddOutput<float>("y", {3, 2}, {2, 12, 30, 56, -0.5f, -6})
      .Run();
  OpTester("ReduceL1", 13)
      .AddAttribute("axes", std::vector<int64_t>{0})
      .AddInput<float>("x", {3, 2, 2}, kX)
      .AddOutput<float>("y", {1, 2, 2}, {7, 8.5f, 12, 15})
      .Run();
  OpTester("ReduceSumSquare", 13)
      .AddAttribute("axes", std::vector<int64_t>{1, 2})
      .AddAttribute("keepdims", int64_t{0})
      .AddInput<float>("x", {3, 2, 2}, kX)
      .AddOutput<float>("y", {3}, {30, 174, 14.25f})
      .Run();
  OpTester("ReduceLogSumExp", 13)
      .AddAttribute("axes", std::vector<int64_t>{2})
      .AddInput<float>("x", {3, 2, 2}, kX)
      .AddOutput<float>("y", {3, 2, 1},
                        {2.3132616875182226f, 4.313261687518223f, 6.313261687518223f, 8.313261687518223f,
                         0.7014132779827524f, 2.006715348489118f})
      .Run();
  OpTester("ReduceMax", 13)
      .AddAttribute("axes", std::vector<int64_t>{0})
      .AddInput<float>("x", {3, 2, 2}, kX)
      .AddOutput<float>("y", {1, 2, 2}, {5, 6, 7, 8})
      .Run();
  OpTester("ReduceMin", 11)
      .AddAttribute("axes", std::vector<int64_t>{2})
      .AddInput<float>("x", {3, 2, 2}, kX)
      .AddOutput<float>("y", {3, 2, 1}, {1, 3, 5, 7, -1, -3})
      .Run();
}

TEST(ReduceTest, DefaultAxesReduceEverything) {
  OpTester("ReduceL2", 13)
      .AddInput<float>("x", {3, 2, 2}, kX)
      .AddOutput<float>("y", {1, 1, 1}, {14.773286702694158f})
      .Run();
  OpTester("ReduceLogSum", 13)
      .AddAttribute("keepdims", int64_t{0})
      .AddInput<double>("x", {2, 2}, {1, 2, 3, 4})
      .AddOutput<double>("y", {}, {std::log(10.0)})
      .Run();
  OpTester("ReduceSum", 11)
      .AddInput<int64_t>("x", {2, 3}, {1, 2, 3, 4, 5, 6})
      .AddOutput<int64_t>("y", {1, 1}, {21})
      .Run();
}

TEST(ReduceTest, NonAdjacentAxesGather) {
  // Axes 0 and 2 of [3,2,2] are separated by kept axis 1: the gather path.
  OpTester("ReduceSum", 11)
      .AddAttribute("axes", std::vector<int64_t>{0, 2})
      .AddInput<float>("x", {3, 2, 2}, kX)
      .AddOutput<float>("y", {1, 2, 1}, {13.5f, 21})
      .Run();
  OpTester("ReduceMax", 13)
      .AddAttribute("axes", std::vector<int64_t>{2, 0})
      .AddAttribute("keepdims", int64_t{0})
      .AddInput<int32_t>("x", {2, 2, 2}, {1, 9, 3, 4, 5, 6, 7, 8})
      .AddOutput<int32_t>("y", {2}, {9, 8})
      .Run();
}

TEST(ReduceTest, SizeOneDimsAndWideInnerBlocks) {
  // Reducing axis 0 of [4, 1, 1000]: inner positions span two accumulator blocks.
  std::vector<double> x(4000), expected(1000);
  for (int i = 0; i < 4000; ++i) x[i] = (i % 1000) * 0.5 + i / 1000;
  for (int i = 0; i < 1000; ++i) expected[i] = 4 * (i * 0.5) + 6;
  OpTester("ReduceSum", 11)
      .AddAttribute("axes", std::vector<int64_t>{0, 1})
      .AddInput<double>("x", {4, 1, 1000}, x)
      .AddOutput<double>("y", {1, 1, 1000}, expected)
      .Run();
}

TEST(ReduceTest, ReduceSumAxesInputAndNoop) {
  OpTester("ReduceSum", 13)
      .AddInput<float>("x", {3, 2, 2}, kX)
      .AddInput<int64_t>("axes", {1}, {-2})
      .AddAttribute("keepdims", int64_t{0})
      .AddOutput<float>("y", {3, 2}, {4, 6, 12, 14, 1, -2.5f})
      .Run();
  // Empty axes: all axes, unless noop_with_empty_axes, which returns the input.
  OpTester("ReduceSum", 13)
      .AddInput<float>("x", {2}, {1, 2})
      .AddInput<int64_t>("axes", {0}, {})
      .AddOutput<float>("y", {1}, {3})
      .Run();
  OpTester("ReduceSum", 13)
      .AddAttribute("noop_with_empty_axes", int64_t{1})
      .AddInput<float>("x", {2}, {1, 2})
      .AddMissingInput()
      .AddOutput<float>("y", {2}, {1, 2})
      .Run();
}

TEST(ReduceTest, EmptyReductionsYieldTheIdentity) {
  const float inf = std::numeric_limits<float>::infinity();
  OpTester("ReduceSum", 11)
      .AddAttribute("axes", std::vector<int64_t>{1})
      .AddInput<float>("x", {2, 0}, {})
      .AddOutput<float>("y", {2, 1}, {0, 0})
      .Run();
  OpTester("ReduceProd", 11)
      .AddAttribute("axes", std::vector<int64_t>{1})
      .AddInput<int32_t>("x", {2, 0}, {})
      .AddOutput<int32_t>("y", {2, 1}, {1, 1})
      .Run();
  OpTester("ReduceMax", 11)
      .AddAttribute("axes", std::vector<int64_t>{1})
      .AddInput<float>("x", {1, 0}, {})
      .AddOutput<float>("y", {1, 1}, {-inf})
      .Run();
  OpTester("ReduceLogSumExp", 11)
      .AddAttribute("axes", std::vector<int64_t>{1})
      .AddInput<float>("x", {1, 0}, {})
      .AddOutput<float>("y", {1, 1}, {-inf})
      .Run();
}

TEST(ReduceTest, ExtremeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // logsumexp stays finite where exp overflows, and handles -inf entries.
  OpTester("ReduceLogSumExp", 13)
      .AddAttribute("axes", std::vector<int64_t>{1})
      .AddInput<float>("x", {2, 2}, {1000, 1000, -inf, 0})
      .AddOutput<float>("y", {2, 1}, {1000 + std::log(2.0f), 0})
      .Run();
  OpTester("ReduceMax", 13)
      .AddAttribute("axes", std::vector<int64_t>{1})
      .AddInput<float>("x", {2, 3}, {1, nan, 3, -inf, -inf, -inf})
      .AddOutput<float>("y", {2, 1}, {nan, -inf})
      .Run();
  OpTester("ReduceMean", 13)
      .AddInput<int32_t>("x", {3}, {1, 2, 4})
      .AddOutput<int32_t>("y", {1}, {2})
      .Run();  // Integer mean truncates (7 / 3).
}

TEST(ReduceTest, BadAxesAndAttributes) {
  auto repeated = OpTester("ReduceMean", 13)
                      .AddAttribute("axes", std::vector<int64_t>{1, 1})
                      .AddInput<float>("x", {2, 2}, {1, 2, 3, 4})
                      .AddOutput<float>("y", {2, 1}, {0, 0})
                      .RunRaw();
  EXPECT_FALSE(repeated.ok());
  auto out_of_range = OpTester("ReduceSum", 13)
                          .AddInput<float>("x", {2, 2}, {1, 2, 3, 4})
                          .AddInput<int64_t>("axes", {1}, {2})
                          .AddOutput<float>("y", {2, 1}, {0, 0})
                          .RunRaw();
  EXPECT_EQ(out_of_range.status().code(), absl::StatusCode::kInvalidArgument);
  auto keepdims = OpTester("ReduceMax", 13)
                      .AddAttribute("keepdims", int64_t{2})
                      .AddInput<float>("x", {2}, {1, 2})
                      .AddOutput<float>("y", {1}, {2})
                      .RunRaw();
  ASSERT_FALSE(keepdims.ok());
  EXPECT_NE(keepdims.status().message().find("keepdims"), std::string::npos) << keepdims.status();
  auto integer_log =
      OpTester("ReduceLogSum", 13).AddInput<int32_t>("x", {2}, {1, 2}).AddOutput<int32_t>("y", {1}, {1}).RunRaw();
  EXPECT_EQ(integer_log.status().code(), absl::StatusCode::kUnimplemented);
}

TEST(ArgMaxTest, AxisKeepdimsAndTies) {
  // x[2,3] = [[2, 5, 5], [7, 1, 7]].
  const std::vector<float> x = {2, 5, 5, 7, 1, 7};
  OpTester("ArgMax", 13)
      .AddAttribute("axis", int64_t{1})
      .AddInput<float>("x", {2, 3}, x)
      .AddOutput<int64_t>("y", {2, 1}, {1, 0})
      .Run();
  OpTester("ArgMax", 13)
      .AddAttribute("axis", int64_t{-1})
      .AddAttribute("select_last_index", int64_t{1})
      .AddAttribute("keepdims", int64_t{0})
      .AddInput<float>("x", {2, 3}, x)
      .AddOutput<int64_t>("y", {2}, {2, 2})
      .Run();
  OpTester("ArgMin", 13).AddInput<float>("x", {2, 3}, x).AddOutput<int64_t>("y", {1, 3}, {0, 1, 0}).Run();
  OpTester("ArgMin", 13)
      .AddAttribute("axis", int64_t{1})
      .AddAttribute("select_last_index", int64_t{1})
      .AddInput<int32_t>("x", {2, 3}, {3, 3, 4, 1, 1, 1})
      .AddOutput<int64_t>("y", {2, 1}, {1, 2})
      .Run();
}

TEST(ArgMaxTest, NanWinsAndErrors) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  OpTester("ArgMax", 13).AddInput<float>("x", {3}, {1, nan, 5}).AddOutput<int64_t>("y", {1}, {1}).Run();
  auto empty_axis = OpTester("ArgMax", 13)
                        .AddAttribute("axis", int64_t{1})
                        .AddInput<float>("x", {2, 0}, {})
                        .AddOutput<int64_t>("y", {2, 1}, {0, 0})
                        .RunRaw();
  EXPECT_EQ(empty_axis.status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_flag = OpTester("ArgMin", 13)
                      .AddAttribute("select_last_index", int64_t{3})
                      .AddInput<float>("x", {1}, {1})
                      .AddOutput<int64_t>("y", {1}, {0})
                      .RunRaw();
  ASSERT_FALSE(bad_flag.ok());
  EXPECT_NE(bad_flag.status().message().find("select_last_index"), std::string::npos);
}

}  // namespace
}  // namespace traind::engine
