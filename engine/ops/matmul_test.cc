#include "engine/runtime/plan.h"
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

// y[b] = a[b] @ w, by definition, for the tests below.
std::vector<float> NaiveBatchedMatMul(const std::vector<float>& a, const std::vector<float>& w, int64_t batches,
                                      int64_t m, int64_t k, int64_t n) {
  std::vector<float> y(batches * m * n, 0.0f);
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t p = 0; p < k; ++p) y[(b * m + i) * n + j] += a[(b * m + i) * k + p] * w[p * n + j];
  return y;
}

std::vector<float> Ramp(int64_t size, float scale) {
  std::vector<float> values(size);
  for (int64_t i = 0; i < size; ++i) values[i] = scale * static_cast<float>((i * 7) % 13 - 6);
  return values;
}

TEST(MatMulTest, BatchedTimesMatrixIsOneTallGemm) {
  // [4,3,5] x [5,6]: the batches fold into the rows of one GEMM.
  const std::vector<float> a = Ramp(4 * 3 * 5, 0.5f), w = Ramp(5 * 6, 0.25f);
  OpTester("MatMul", 13).AddInput<float>("a", {4, 3, 5}, a).AddInput<float>("b", {5, 6}, w)
      .AddOutput<float>("y", {4, 3, 6}, NaiveBatchedMatMul(a, w, 4, 3, 5, 6)).Run();
}

TEST(MatMulTest, ManySmallBatchesRunInParallel) {
  // [2,8,3,4] x [2,8,4,2]: 16 independent GEMMs, split across threads.
  const std::vector<float> a = Ramp(16 * 3 * 4, 1.0f), b = Ramp(16 * 4 * 2, 0.5f);
  std::vector<float> expected;
  for (int64_t batch = 0; batch < 16; ++batch) {
    const std::vector<float> a_batch(a.begin() + batch * 12, a.begin() + (batch + 1) * 12);
    const std::vector<float> b_batch(b.begin() + batch * 8, b.begin() + (batch + 1) * 8);
    const std::vector<float> y = NaiveBatchedMatMul(a_batch, b_batch, 1, 3, 4, 2);
    expected.insert(expected.end(), y.begin(), y.end());
  }
  OpTester("MatMul", 13).AddInput<float>("a", {2, 8, 3, 4}, a).AddInput<float>("b", {2, 8, 4, 2}, b)
      .AddOutput<float>("y", {2, 8, 3, 2}, expected).Run();
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

// A Gemm whose B (and C) are the model's constants runs on weights prepared at compile time (Kernel::
// PrepareConstants): the same results as with B and C fed as inputs, for each transB, C form and row count, and
// the plan counts the prepared copy with its constants. alpha != 1 and a C that is an input are not prepared.
TEST(GemmTest, ConstantWeightsArePreparedOnceAndAgreeWithTheGeneralPath) {
  struct Case {
    bool trans_b;
    std::vector<int64_t> c_shape;  // empty vector with c_given: a scalar C
    bool c_given, c_constant;
    float alpha, beta;
    int64_t m;
    bool prepared;
  };
  const Case cases[] = {
      {true, {}, false, false, 1.0f, 1.0f, 64, true},     {false, {}, false, false, 1.0f, 1.0f, 3, true},
      {true, {37}, true, true, 1.0f, 1.0f, 1, true},      {false, {1, 37}, true, true, 1.0f, 0.5f, 5, true},
      {true, {}, true, true, 1.0f, 2.0f, 8, true},        {true, {37}, true, false, 1.0f, 1.0f, 4, false},
      {true, {37}, true, true, 2.0f, 1.0f, 4, false},
  };
  const int64_t k = 19, n = 37;
  for (const Case& test : cases) {
    SCOPED_TRACE(::testing::Message() << "transB " << test.trans_b << " C rank " << test.c_shape.size() << " given "
                                      << test.c_given << " constant " << test.c_constant << " alpha " << test.alpha
                                      << " beta " << test.beta << " M " << test.m);
    const Shape b_shape = test.trans_b ? Shape{n, k} : Shape{k, n};
    const std::vector<float> a = Ramp(test.m * k, 0.37f), b = Ramp(n * k, 0.11f);
    const int64_t c_size = test.c_shape.empty() ? 1 : test.c_shape.back();
    const std::vector<float> c = Ramp(c_size, 1.3f);
    std::vector<float> expected(test.m * n);
    for (int64_t i = 0; i < test.m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) sum += double{a[i * k + p]} * (test.trans_b ? b[j * k + p] : b[p * n + j]);
        expected[i * n + j] = static_cast<float>(test.alpha * sum + (test.c_given ? test.beta * c[j % c_size] : 0.0));
      }
    }
    for (const bool constant : {false, true}) {
      OpTester gemm("Gemm", 13);
      gemm.AddAttribute("transB", int64_t{test.trans_b}).AddAttribute("alpha", test.alpha)
          .AddAttribute("beta", test.beta).AddInput<float>("a", {test.m, k}, a);
      if (constant) {
        gemm.AddConstantInput<float>("b", b_shape, b);
      } else {
        gemm.AddInput<float>("b", b_shape, b);
      }
      if (test.c_given && constant && test.c_constant) {
        gemm.AddConstantInput<float>("c", Shape(test.c_shape.begin(), test.c_shape.end()), c);
      } else if (test.c_given) {
        gemm.AddInput<float>("c", Shape(test.c_shape.begin(), test.c_shape.end()), c);
      }
      gemm.AddOutput<float>("y", {test.m, n}, expected).SetTolerance(1e-5, 1e-4).Run();
      absl::StatusOr<std::shared_ptr<const Plan>> plan = Compile(gemm.model());
      ASSERT_TRUE(plan.ok()) << plan.status();
      int64_t raw_constant_bytes = 0;
      for (const auto& [slot, tensor] : (*plan)->constants) raw_constant_bytes += tensor.byte_size();
      const bool expect_prepared = constant && test.prepared;
      EXPECT_EQ((*plan)->memory.constant_bytes > raw_constant_bytes, expect_prepared)
          << (*plan)->memory.constant_bytes << " bytes counted, " << raw_constant_bytes << " of constants";
    }
  }
}

TEST(MatMulTest, IntegerIsUnsupported) {
  auto result = OpTester("MatMul", 13).AddInput<int32_t>("a", {1, 1}, {1})
                    .AddInput<int32_t>("b", {1, 1}, {1}).AddOutput<int32_t>("y", {1, 1}, {1})
                    .RunRaw();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace traind::engine
