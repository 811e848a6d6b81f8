#include <cmath>

#include "engine/model/traind_schemas.h"
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

// `tensor` with its last two axes swapped (a float tensor of rank >= 2), by definition.
Tensor SwapLastTwo(const Tensor& tensor) {
  Shape shape = tensor.shape();
  const size_t rank = shape.size();
  const int64_t rows = shape[rank - 2], cols = shape[rank - 1], planes = tensor.num_elements() / (rows * cols);
  std::swap(shape[rank - 2], shape[rank - 1]);
  std::vector<float> values(tensor.num_elements());
  const float* in = tensor.data<float>();
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) values[(p * cols + j) * rows + i] = in[(p * rows + i) * cols + j];
  return *Tensor::FromVector<float>(shape, values);
}

TEST(FusedMatMulTest, TransposedOperandsEqualMatMulOfTransposedCopies) {
  struct Case {
    Shape a, b, y;  // a and b as MatMul sees them (before any transpose)
  };
  for (const Case& c : {Case{{5, 7}, {7, 3}, {5, 3}},                        // one GEMM
                        Case{{2, 5, 7}, {7, 3}, {2, 5, 3}},                  // B without batches
                        Case{{4, 5, 7}, {4, 7, 3}, {4, 5, 3}},               // equal batches
                        Case{{5, 7}, {4, 7, 3}, {4, 5, 3}},                  // A shared by the batch
                        Case{{2, 1, 5, 7}, {1, 3, 7, 3}, {2, 3, 5, 3}}}) {  // both broadcast
    for (int64_t trans_a : {0, 1}) {
      for (int64_t trans_b : {0, 1}) {
        SCOPED_TRACE(ShapeToString(c.a) + " x " + ShapeToString(c.b) + " transA " + std::to_string(trans_a) +
                     " transB " + std::to_string(trans_b));
        const Tensor a = testing::RandomTensor(c.a, -1, 1, 1), b = testing::RandomTensor(c.b, -1, 1, 2);
        OpTester plain("MatMul", 13);
        plain.AddInputTensor("a", a).AddInputTensor("b", b).AddOutputShape("y", DataType::kFloat32, c.y);
        absl::StatusOr<std::vector<Tensor>> expected = plain.RunRaw();
        ASSERT_TRUE(expected.ok()) << expected.status();
        OpTester fused("FusedMatMul", kTraindTrainingVersion, kTraindTrainingDomain);
        fused.AddInputTensor("a", trans_a ? SwapLastTwo(a) : a).AddInputTensor("b", trans_b ? SwapLastTwo(b) : b);
        fused.AddAttribute("transA", trans_a).AddAttribute("transB", trans_b);
        fused.AddOutputShape("y", DataType::kFloat32, c.y);
        absl::StatusOr<std::vector<Tensor>> got = fused.RunRaw();
        ASSERT_TRUE(got.ok()) << got.status();
        ASSERT_EQ((*got)[0].shape(), (*expected)[0].shape());
        for (int64_t i = 0; i < (*got)[0].num_elements(); ++i) {
          EXPECT_NEAR((*got)[0].data<float>()[i], (*expected)[0].data<float>()[i], 1e-5) << i;
        }
      }
    }
  }
}

TEST(FusedMatMulTest, RefusesVectorsMismatchedInnerDimsAndOtherAttributeValues) {
  auto run = [](Shape a, Shape b, int64_t trans_a) {
    OpTester test("FusedMatMul", kTraindTrainingVersion, kTraindTrainingDomain);
    test.AddInputTensor("a", testing::RandomTensor(a, -1, 1, 1)).AddInputTensor("b", testing::RandomTensor(b, -1, 1, 2));
    test.AddAttribute("transA", trans_a);
    test.AddOutputShape("y", DataType::kFloat32, {5, 3});
    return test.RunRaw().status();
  };
  EXPECT_FALSE(run({7}, {7, 3}, 0).ok());
  EXPECT_FALSE(run({5, 7}, {7, 3}, 1).ok());  // A^T is [7, 5]
  EXPECT_TRUE(run({7, 5}, {7, 3}, 1).ok());
  EXPECT_FALSE(run({7, 5}, {7, 3}, 2).ok());
}

// FusedMatMul's optional bias (what a CPU plan folds a Linear's bias Add into): the product plus the bias on every
// row, against MatMul then Add, on each path of the kernel (rows folded, one GEMM, many GEMMs), a bias of N values
// and of one; a bias of another length is refused, naming it.
TEST(FusedMatMulTest, ABiasIsAddedToEveryRow) {
  struct Case {
    Shape a, b, y;
  };
  for (const Case& c : {Case{{5, 7}, {7, 3}, {5, 3}}, Case{{2, 5, 7}, {7, 3}, {2, 5, 3}},
                        Case{{4, 5, 7}, {4, 7, 3}, {4, 5, 3}}}) {
    for (int64_t bias_length : {3, 1}) {
      SCOPED_TRACE(ShapeToString(c.a) + " x " + ShapeToString(c.b) + " bias of " + std::to_string(bias_length));
      const Tensor a = testing::RandomTensor(c.a, -1, 1, 1), b = testing::RandomTensor(c.b, -1, 1, 2);
      const Tensor bias = testing::RandomTensor({bias_length}, -1, 1, 3);
      OpTester product("MatMul", 13);
      product.AddInputTensor("a", a).AddInputTensor("b", b).AddOutputShape("y", DataType::kFloat32, c.y);
      absl::StatusOr<std::vector<Tensor>> unbiased = product.RunRaw();
      ASSERT_TRUE(unbiased.ok()) << unbiased.status();
      OpTester fused("FusedMatMul", kTraindTrainingVersion, kTraindTrainingDomain);
      fused.AddInputTensor("a", a).AddInputTensor("b", b).AddInputTensor("bias", bias);
      fused.AddOutputShape("y", DataType::kFloat32, c.y);
      absl::StatusOr<std::vector<Tensor>> got = fused.RunRaw();
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ((*got)[0].shape(), c.y);
      for (int64_t i = 0; i < (*got)[0].num_elements(); ++i) {
        const float expected = (*unbiased)[0].data<float>()[i] + bias.data<float>()[bias_length == 1 ? 0 : i % 3];
        EXPECT_NEAR((*got)[0].data<float>()[i], expected, 1e-5) << i;
      }
    }
  }
  OpTester wrong("FusedMatMul", kTraindTrainingVersion, kTraindTrainingDomain);
  wrong.AddInputTensor("a", testing::RandomTensor({5, 7}, -1, 1, 1))
      .AddInputTensor("b", testing::RandomTensor({7, 3}, -1, 1, 2))
      .AddInputTensor("bias", testing::RandomTensor({4}, -1, 1, 3))
      .AddOutputShape("y", DataType::kFloat32, {5, 3});
  absl::StatusOr<std::vector<Tensor>> refused = wrong.RunRaw();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("bias float[4]"), std::string::npos) << refused.status();
}

// A Linear layer's product in training, Y = A * B^T + bias with B an input stored [N, K] (FusedMatMul transB with
// A's batches folded into rows, Gemm transB with C a row of N), runs oneDNN's matmul primitive from 2^21
// multiply-adds up and sgemm below (TransposedWeightProduct): against a float64 product on both sides of that line,
// from one row to an MLP layer's 64 x 784 x 512, with a bias of N values, of one value (sgemm) and none, and for Gemm
// with C as [N] and [1, N], beta 1 and beta 0.
TEST(FusedMatMulTest, ATransposedWeightMatchesAFloat64Product) {
  struct Case {
    Shape a;
    int64_t n;
    int64_t bias_length;  // 0: no bias
  };
  for (const Case& c : {Case{{1, 9}, 5, 5}, Case{{3, 4, 40}, 24, 24}, Case{{3, 4, 40}, 24, 1}, Case{{7, 33}, 17, 0},
                        Case{{2, 128, 96}, 96, 96}, Case{{2, 128, 96}, 96, 0}, Case{{2, 128, 96}, 96, 1},
                        Case{{64, 784}, 512, 512}}) {
    SCOPED_TRACE(ShapeToString(c.a) + " x [" + std::to_string(c.n) + ", K]^T, bias of " +
                 std::to_string(c.bias_length));
    const int64_t k = c.a.back(), rows = Tensor::Allocate(DataType::kFloat32, c.a)->num_elements() / k;
    const Tensor a = testing::RandomTensor(c.a, -1, 1, 1), b = testing::RandomTensor({c.n, k}, -1, 1, 2);
    const Tensor bias = testing::RandomTensor({std::max<int64_t>(c.bias_length, 1)}, -1, 1, 3);
    Shape y_shape = c.a;
    y_shape.back() = c.n;
    std::vector<float> expected(rows * c.n);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double sum = c.bias_length == 0 ? 0.0 : bias.data<float>()[c.bias_length == 1 ? 0 : j];
        for (int64_t p = 0; p < k; ++p) sum += double{a.data<float>()[i * k + p]} * b.data<float>()[j * k + p];
        expected[i * c.n + j] = static_cast<float>(sum);
      }
    }
    OpTester fused("FusedMatMul", kTraindTrainingVersion, kTraindTrainingDomain);
    fused.AddInputTensor("a", a).AddInputTensor("b", b).AddAttribute("transB", int64_t{1});
    if (c.bias_length > 0) fused.AddInputTensor("bias", bias);
    // float32 sums of K products of values in [-1, 1] drift from the float64 sum by ~sqrt(K) roundings; a wrong
    // operand layout is off by O(1).
    const double atol = 5e-6 * std::sqrt(static_cast<double>(k));
    fused.AddOutput<float>("y", y_shape, expected).SetTolerance(1e-5, atol).Run();
    if (c.a.size() != 2) continue;
    for (const Shape& c_shape : {Shape{c.n}, Shape{1, c.n}}) {
      for (const float beta : {1.0f, 0.0f}) {
        if (c.bias_length != c.n && beta != 0.0f) continue;
        std::vector<float> gemm_expected = expected;
        if (beta == 0.0f && c.bias_length > 0) {
          for (int64_t i = 0; i < rows * c.n; ++i) gemm_expected[i] -= bias.data<float>()[i % c.n];
        }
        SCOPED_TRACE(::testing::Message() << "Gemm, C " << ShapeToString(c_shape) << " beta " << beta);
        OpTester gemm("Gemm", 13);
        gemm.AddAttribute("transB", int64_t{1}).AddAttribute("beta", beta).AddInputTensor("a", a)
            .AddInputTensor("b", b);
        if (c.bias_length == c.n) gemm.AddInput<float>("c", c_shape, std::vector<float>(bias.data<float>(),
                                                                                      bias.data<float>() + c.n));
        gemm.AddOutput<float>("y", {rows, c.n}, gemm_expected).SetTolerance(1e-5, atol).Run();
      }
    }
  }
}

// Products of equal batches with A read as stored (attention's Q K^T and scores x V, and their gradients) run one
// oneDNN matmul primitive for all batches from 2^21 multiply-adds in all, one sgemm per batch below (BatchedProduct):
// against float64 products on both sides of that line, with B read transposed and as stored, and with A transposed
// (always sgemm).
TEST(FusedMatMulTest, EqualBatchesMatchAFloat64Product) {
  struct Case {
    Shape batch;
    int64_t m, n, k;
    bool ta, tb;
  };
  for (const Case& c : {Case{{16, 4}, 64, 64, 32, false, true}, Case{{16, 4}, 64, 32, 64, false, false},
                        Case{{16, 4}, 64, 32, 64, true, false}, Case{{2, 3}, 5, 7, 4, false, true},
                        Case{{2, 3}, 5, 7, 4, false, false}, Case{{8}, 64, 64, 32, false, true}}) {
    SCOPED_TRACE(::testing::Message() << ShapeToString(c.batch) << " m " << c.m << " n " << c.n << " k " << c.k
                                      << " transA " << c.ta << " transB " << c.tb);
    Shape a_shape = c.batch, b_shape = c.batch, y_shape = c.batch;
    a_shape.push_back(c.ta ? c.k : c.m);
    a_shape.push_back(c.ta ? c.m : c.k);
    b_shape.push_back(c.tb ? c.n : c.k);
    b_shape.push_back(c.tb ? c.k : c.n);
    y_shape.push_back(c.m);
    y_shape.push_back(c.n);
    const Tensor a = testing::RandomTensor(a_shape, -1, 1, 4), b = testing::RandomTensor(b_shape, -1, 1, 5);
    const int64_t batches = a.num_elements() / (c.m * c.k);
    std::vector<float> expected(batches * c.m * c.n);
    for (int64_t batch = 0; batch < batches; ++batch) {
      const float* a_data = a.data<float>() + batch * c.m * c.k;
      const float* b_data = b.data<float>() + batch * c.k * c.n;
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t j = 0; j < c.n; ++j) {
          double sum = 0;
          for (int64_t p = 0; p < c.k; ++p) {
            sum += double{a_data[c.ta ? p * c.m + i : i * c.k + p]} * b_data[c.tb ? j * c.k + p : p * c.n + j];
          }
          expected[(batch * c.m + i) * c.n + j] = static_cast<float>(sum);
        }
      }
    }
    OpTester fused("FusedMatMul", kTraindTrainingVersion, kTraindTrainingDomain);
    fused.AddInputTensor("a", a).AddInputTensor("b", b).AddAttribute("transA", int64_t{c.ta})
        .AddAttribute("transB", int64_t{c.tb});
    fused.AddOutput<float>("y", y_shape, expected).SetTolerance(1e-5, 5e-6 * std::sqrt(double(c.k))).Run();
  }
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

// MatMul and FusedMatMul (with and without a bias) whose B is a constant matrix run on prepared weights, A's batches
// and rows as one matrix: the same results as the general path, and the plan counts the prepared copy. A bias that
// is an input, a transposed A or batched B are not prepared.
TEST(MatMulTest, ConstantWeightsArePreparedForBatchesOfRows) {
  struct Case {
    const char* op;
    bool trans_b;
    int bias;  // 0: none, 1: a constant of N values, 2: a constant of one, 3: an input
    bool prepared;
  };
  const Case cases[] = {{"MatMul", false, 0, true},      {"FusedMatMul", true, 0, true},
                        {"FusedMatMul", true, 1, true},  {"FusedMatMul", false, 2, true},
                        {"FusedMatMul", true, 3, false}};
  const int64_t k = 19, n = 37;
  const Shape a_shape = {3, 5, k};
  const std::vector<float> a = Ramp(3 * 5 * k, 0.37f), b = Ramp(n * k, 0.11f), bias = Ramp(n, 1.3f);
  for (const Case& test : cases) {
    SCOPED_TRACE(::testing::Message() << test.op << " transB " << test.trans_b << " bias " << test.bias);
    const int64_t bias_size = test.bias == 2 ? 1 : n;
    std::vector<float> expected(3 * 5 * n);
    for (int64_t i = 0; i < 15; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = test.bias == 0 ? 0.0 : bias[j % bias_size];
        for (int64_t p = 0; p < k; ++p) sum += double{a[i * k + p]} * (test.trans_b ? b[j * k + p] : b[p * n + j]);
        expected[i * n + j] = static_cast<float>(sum);
      }
    }
    const bool fused = std::string(test.op) == "FusedMatMul";
    OpTester product = fused ? OpTester(test.op, kTraindTrainingVersion, kTraindTrainingDomain) : OpTester(test.op, 13);
    if (fused) product.AddAttribute("transB", int64_t{test.trans_b});
    product.AddInput<float>("a", a_shape, a).AddConstantInput<float>("b", test.trans_b ? Shape{n, k} : Shape{k, n}, b);
    const std::vector<float> bias_values(bias.begin(), bias.begin() + bias_size);
    if (test.bias == 1 || test.bias == 2) product.AddConstantInput<float>("bias", {bias_size}, bias_values);
    if (test.bias == 3) product.AddInput<float>("bias", {bias_size}, bias_values);
    product.AddOutput<float>("y", {3, 5, n}, expected).SetTolerance(1e-5, 1e-4).Run();
    absl::StatusOr<std::shared_ptr<const Plan>> plan = Compile(product.model());
    ASSERT_TRUE(plan.ok()) << plan.status();
    int64_t raw_constant_bytes = 0;
    for (const auto& [slot, tensor] : (*plan)->constants) raw_constant_bytes += tensor.byte_size();
    EXPECT_EQ((*plan)->memory.constant_bytes > raw_constant_bytes, test.prepared)
        << (*plan)->memory.constant_bytes << " bytes counted, " << raw_constant_bytes << " of constants";
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
