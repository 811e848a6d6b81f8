// SmallGemm against a float64 product, over every transposition, tile tails, padded leading dimensions and alpha.
#include "engine/ops/small_gemm.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace traind::engine {
namespace {

struct Case {
  int64_t m, n, k;
};

// Checks C = alpha * op(A) op(B) for one shape and transposition; operands stored with `pad` extra columns.
void CheckProduct(const Case& shape, bool trans_a, bool trans_b, float alpha, int64_t pad, std::mt19937& random) {
  const auto [m, n, k] = shape;
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
  const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
  std::vector<float> a(a_rows * lda), b(b_rows * ldb);
  for (float& value : a) value = uniform(random);
  for (float& value : b) value = uniform(random);
  const float sentinel = 12345.0f;
  std::vector<float> c(m * ldc + 1, sentinel);
  std::vector<float> scratch(SmallGemmScratchFloats({b.data(), ldb, trans_b}, k, n) + 1, sentinel);
  SmallGemm(m, n, k, alpha, {a.data(), lda, trans_a}, {b.data(), ldb, trans_b}, c.data(), ldc, scratch.data());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = c[i * ldc + j];
      if (j >= n) {
        ASSERT_EQ(got, sentinel) << "wrote past column " << n << " at (" << i << ", " << j << ")";
        continue;
      }
      double expected = 0.0, magnitude = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = trans_a ? a[p * lda + i] : a[i * lda + p];
        const double y = trans_b ? b[j * ldb + p] : b[p * ldb + j];
        expected += x * y;
        magnitude += std::fabs(x * y);
      }
      expected *= alpha;
      // float32 accumulation over k terms: a few ulps of the sum of magnitudes per term.
      const double tolerance = 4e-7 * (k + 1) * std::fabs(alpha) * magnitude + 1e-30;
      ASSERT_NEAR(got, expected, tolerance) << "m " << m << " n " << n << " k " << k << " transA " << trans_a
                                            << " transB " << trans_b << " at (" << i << ", " << j << ")";
    }
  }
  EXPECT_EQ(c[m * ldc], sentinel) << "wrote past the last row";
  EXPECT_EQ(scratch.back(), sentinel) << "wrote past the scratch";
}

TEST(SmallGemmTest, MatchesFloat64OverShapesAndTranspositions) {
  std::mt19937 random(7);
  // Attention's shapes, tile tails in rows (12 / 8 / 6 / 4 per tile) and columns (16-lane vectors, blocks of 64),
  // 16 x 16 transpose blocks with and without edges, and degenerate sizes.
  const std::vector<Case> cases = {{64, 64, 32}, {64, 32, 64}, {1, 1, 1},   {7, 5, 3},     {13, 17, 19}, {12, 16, 16},
                                   {25, 33, 47}, {9, 48, 16},  {31, 80, 5}, {100, 130, 70}, {3, 200, 1},  {50, 1, 64}};
  for (const Case& shape : cases) {
    for (int trans_a = 0; trans_a < 2; ++trans_a) {
      for (int trans_b = 0; trans_b < 2; ++trans_b) {
        CheckProduct(shape, trans_a, trans_b, 1.0f, 0, random);
        CheckProduct(shape, trans_a, trans_b, -0.125f, 3, random);
      }
    }
  }
}

TEST(SmallGemmTest, EmptyInnerDimensionGivesZeros) {
  std::vector<float> c(6, 1.0f);
  float dummy = 0.0f;
  SmallGemm(2, 3, 0, 1.0f, {&dummy, 1, false}, {&dummy, 3, false}, c.data(), 3, nullptr);
  for (float value : c) EXPECT_EQ(value, 0.0f);
}

}  // namespace
}  // namespace traind::engine
