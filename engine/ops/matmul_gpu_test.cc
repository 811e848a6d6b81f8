// The GPU kernels of MatMul and Gemm (CLBlast) against the CPU kernels (oneDNN).
#include "engine/gpu/gpu_testing.h"
#include "engine/model/traind_schemas.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;
using testing::RandomTensor;

TEST(MatMulGpuTest, BatchesBroadcastsAndVectorsMatchTheCpu) {
  TRAIND_REQUIRE_GPU();
  struct Case {
    Shape a, b, out;
  };
  for (const Case& c : {Case{{5, 7}, {7, 3}, {5, 3}},            // one GEMM
                        Case{{2, 5, 7}, {7, 3}, {2, 5, 3}},      // A's batches folded into rows
                        Case{{4, 5, 7}, {4, 7, 3}, {4, 5, 3}},   // strided batched
                        Case{{5, 7}, {4, 7, 3}, {4, 5, 3}},      // A shared by the batch
                        Case{{2, 1, 5, 7}, {1, 3, 7, 3}, {2, 3, 5, 3}},  // both broadcast
                        Case{{7}, {7, 3}, {3}}, Case{{2, 5, 7}, {7}, {2, 5}}}) {
    SCOPED_TRACE(ShapeToString(c.a) + " x " + ShapeToString(c.b));
    OpTester test("MatMul", 13);
    test.AddInputTensor("a", RandomTensor(c.a, -1, 1, 1)).AddInputTensor("b", RandomTensor(c.b, -1, 1, 2));
    test.AddOutputShape("y", DataType::kFloat32, c.out);
    test.CompareDevices(1e-5, 1e-6);
  }
}

TEST(FusedMatMulGpuTest, TransposedOperandsMatchTheCpu) {
  TRAIND_REQUIRE_GPU();
  for (int64_t trans_a : {0, 1}) {
    for (int64_t trans_b : {0, 1}) {
      struct Case {
        Shape a, b, out;  // a and b as stored (transposed where the attribute says)
      };
      const int64_t m = 5, k = 7, n = 3;
      const Shape a2 = trans_a ? Shape{k, m} : Shape{m, k}, b2 = trans_b ? Shape{n, k} : Shape{k, n};
      auto batched = [](Shape batch, const Shape& matrix) {
        batch.insert(batch.end(), matrix.begin(), matrix.end());
        return batch;
      };
      for (const Case& c : {Case{a2, b2, {m, n}}, Case{batched({2}, a2), b2, {2, m, n}},
                            Case{batched({4}, a2), batched({4}, b2), {4, m, n}},
                            Case{a2, batched({4}, b2), {4, m, n}},
                            Case{batched({2, 1}, a2), batched({1, 3}, b2), {2, 3, m, n}}}) {
        SCOPED_TRACE(ShapeToString(c.a) + " x " + ShapeToString(c.b) + " transA " + std::to_string(trans_a) +
                     " transB " + std::to_string(trans_b));
        OpTester test("FusedMatMul", kTraindTrainingVersion, kTraindTrainingDomain);
        test.AddInputTensor("a", RandomTensor(c.a, -1, 1, 1)).AddInputTensor("b", RandomTensor(c.b, -1, 1, 2));
        test.AddAttribute("transA", trans_a).AddAttribute("transB", trans_b);
        test.AddOutputShape("y", DataType::kFloat32, c.out);
        test.CompareDevices(1e-5, 1e-6);
      }
    }
  }
}

TEST(GemmGpuTest, TransposesAlphaBetaAndBroadcastCMatchTheCpu) {
  TRAIND_REQUIRE_GPU();
  for (int64_t trans_a : {0, 1}) {
    for (int64_t trans_b : {0, 1}) {
      for (const Shape& c_shape : {Shape{}, Shape{4}, Shape{3, 1}, Shape{3, 4}}) {
        SCOPED_TRACE(std::to_string(trans_a) + std::to_string(trans_b) + " C " + ShapeToString(c_shape));
        OpTester test("Gemm", 13);
        test.AddInputTensor("a", RandomTensor(trans_a ? Shape{6, 3} : Shape{3, 6}, -1, 1, 1));
        test.AddInputTensor("b", RandomTensor(trans_b ? Shape{4, 6} : Shape{6, 4}, -1, 1, 2));
        test.AddInputTensor("c", RandomTensor(c_shape, -1, 1, 3));
        test.AddAttribute("transA", trans_a).AddAttribute("transB", trans_b);
        test.AddAttribute("alpha", 0.5f).AddAttribute("beta", 2.0f);
        test.AddOutputShape("y", DataType::kFloat32, {3, 4});
        test.CompareDevices(1e-5, 1e-6);
      }
    }
  }
}

// Larger than CLBlast's direct-GEMM threshold, so its indirect kernels (padded copies) run too.
TEST(GemmGpuTest, ALargeProductMatchesTheCpu) {
  TRAIND_REQUIRE_GPU();
  OpTester test("Gemm", 13);
  test.AddInputTensor("a", RandomTensor({300, 257}, -1, 1, 1)).AddInputTensor("b", RandomTensor({130, 257}, -1, 1, 2));
  test.AddAttribute("transB", int64_t{1});
  test.AddOutputShape("y", DataType::kFloat32, {300, 130});
  test.CompareDevices(2e-5, 2e-5);
}

}  // namespace
}  // namespace traind::engine
