#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

TEST(MatMulTest, MatrixAndVectorPromotion) {
  OpTester("MatMul", 13).AddInput<float>("a", {2, 3}, {1, 2, 3, 4, 5, 6})
      .AddInput<float>("b", {3, 2}, {1, 0, 0, 1, 1, 1})
      .AddOutput<float>("y", {2, 2}, {4, 5, 10, 11}).Run();
  OpTester("MatMul", 13).AddInput<float>("a", {3}, {1, 2, 3})
      .AddInput<float>("b", {3, 2}, {1, 0, 0, 1, 1, 1}).AddOutput<float>("y", {2}, {4, 5}).Run();
  OpTester("MatMul", 13).AddInput<double>("a", {2, 3}, {1, 2, 3, 4, 5, 6})
      .AddInput<double>("b", {3}, {1, 1, 1}).AddOutput<double>("y", {2}, {6, 15}).Run();
}

TEST(MatMulTest, BroadcastBatches) {
  // a: [2,1,1,2] batches broadcast against b: [3,2,1].
  OpTester("MatMul", 13)
      .AddInput<float>("a", {2, 1, 1, 2}, {1, 2, 3, 4})
      .AddInput<float>("b", {3, 2, 1}, {1, 1, 2, 0, 0, 3})
      .AddOutput<float>("y", {2, 3, 1, 1}, {3, 2, 6, 7, 6, 12})
      .Run();
}

TEST(GemmTest, TransposesAlphaBetaAndBroadcastC) {
  OpTester("Gemm", 13).AddAttribute("transA", int64_t{1}).AddAttribute("alpha", 2.0f)
      .AddAttribute("beta", 0.5f)
      .AddInput<float>("a", {3, 2}, {1, 4, 2, 5, 3, 6})  // A^T = [[1,2,3],[4,5,6]]
      .AddInput<float>("b", {3, 2}, {1, 0, 0, 1, 1, 1})
      .AddInput<float>("c", {2}, {10, 20})
      .AddOutput<float>("y", {2, 2}, {13, 20, 25, 32}).Run();
  OpTester("Gemm", 13).AddAttribute("transB", int64_t{1})
      .AddInput<float>("a", {1, 2}, {1, 2}).AddInput<float>("b", {2, 2}, {1, 2, 3, 4})
      .AddOutput<float>("y", {1, 2}, {5, 11}).Run();
}

TEST(MatMulTest, IntegerIsUnsupported) {
  auto result = OpTester("MatMul", 13).AddInput<int32_t>("a", {1, 1}, {1})
                    .AddInput<int32_t>("b", {1, 1}, {1}).AddOutput<int32_t>("y", {1, 1}, {1})
                    .RunRaw();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace traind::engine
