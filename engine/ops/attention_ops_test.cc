// ScaledDotProductAttention and its gradient against float64 computations of the unfused chain: S = scale * Q op(B),
// P = softmax(S) by rows, O = P V; dV = P^T dO, dP = dO V^T, dS = scale * P * (dP - rowsum(dP * P)), dQ = dS op(B)^T,
// d op(B) = Q^T dS (transposed back for a transposed B).
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/model/traind_schemas.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;
using testing::RandomTensor;

struct Dims {
  Shape batch;
  int64_t lq, lk, d, dv;
  int64_t batches() const {
    int64_t count = 1;
    for (int64_t dim : batch) count *= dim;
    return count;
  }
  Shape Of(int64_t rows, int64_t cols) const {
    Shape shape(batch.size() + 2);
    std::copy(batch.begin(), batch.end(), shape.begin());
    shape[batch.size()] = rows;
    shape[batch.size() + 1] = cols;
    return shape;
  }
};

struct Reference {
  std::vector<double> o, p, dq, db, dv;
};

// float64 forward and backward of one problem; `keys` is B, [.., D, Lk] (or [.., Lk, D] when trans_b).
Reference ComputeReference(const Dims& s, const Tensor& q, const Tensor& keys, const Tensor& v, const Tensor& dout,
                           float scale, bool trans_b) {
  Reference r;
  const int64_t n = s.batches();
  r.o.assign(n * s.lq * s.dv, 0.0);
  r.p.assign(n * s.lq * s.lk, 0.0);
  r.dq.assign(n * s.lq * s.d, 0.0);
  r.db.assign(n * s.d * s.lk, 0.0);
  r.dv.assign(n * s.lk * s.dv, 0.0);
  const float* Q = q.data<float>();
  const float* B = keys.data<float>();
  const float* V = v.data<float>();
  const float* dO = dout.data<float>();
  auto b_at = [&](int64_t i, int64_t depth, int64_t key) {  // op(B)[depth, key]
    return double{trans_b ? B[(i * s.lk + key) * s.d + depth] : B[(i * s.d + depth) * s.lk + key]};
  };
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> ds(s.lq * s.lk);
    for (int64_t row = 0; row < s.lq; ++row) {
      std::vector<double> scores(s.lk);
      double max = -INFINITY;
      for (int64_t key = 0; key < s.lk; ++key) {
        double dot = 0.0;
        for (int64_t depth = 0; depth < s.d; ++depth) dot += Q[(i * s.lq + row) * s.d + depth] * b_at(i, depth, key);
        scores[key] = scale * dot;
        max = std::max(max, scores[key]);
      }
      double sum = 0.0;
      for (double& value : scores) sum += (value = std::exp(value - max));
      double* p = &r.p[(i * s.lq + row) * s.lk];
      for (int64_t key = 0; key < s.lk; ++key) p[key] = scores[key] / sum;
      for (int64_t col = 0; col < s.dv; ++col) {
        double out = 0.0;
        for (int64_t key = 0; key < s.lk; ++key) out += p[key] * V[(i * s.lk + key) * s.dv + col];
        r.o[(i * s.lq + row) * s.dv + col] = out;
      }
      // Backward of this row: dP, then dS.
      std::vector<double> dp(s.lk);
      double weighted = 0.0;
      for (int64_t key = 0; key < s.lk; ++key) {
        for (int64_t col = 0; col < s.dv; ++col) {
          dp[key] += double{dO[(i * s.lq + row) * s.dv + col]} * V[(i * s.lk + key) * s.dv + col];
        }
        weighted += dp[key] * p[key];
      }
      for (int64_t key = 0; key < s.lk; ++key) ds[row * s.lk + key] = scale * p[key] * (dp[key] - weighted);
    }
    for (int64_t key = 0; key < s.lk; ++key) {
      for (int64_t col = 0; col < s.dv; ++col) {
        double sum = 0.0;
        for (int64_t row = 0; row < s.lq; ++row) sum += r.p[(i * s.lq + row) * s.lk + key] * dO[(i * s.lq + row) * s.dv + col];
        r.dv[(i * s.lk + key) * s.dv + col] = sum;
      }
    }
    for (int64_t row = 0; row < s.lq; ++row) {
      for (int64_t depth = 0; depth < s.d; ++depth) {
        double sum = 0.0;
        for (int64_t key = 0; key < s.lk; ++key) sum += ds[row * s.lk + key] * b_at(i, depth, key);
        r.dq[(i * s.lq + row) * s.d + depth] = sum;
      }
    }
    for (int64_t depth = 0; depth < s.d; ++depth) {
      for (int64_t key = 0; key < s.lk; ++key) {
        double sum = 0.0;
        for (int64_t row = 0; row < s.lq; ++row) sum += Q[(i * s.lq + row) * s.d + depth] * ds[row * s.lk + key];
        const int64_t at = trans_b ? (i * s.lk + key) * s.d + depth : (i * s.d + depth) * s.lk + key;
        r.db[at] = sum;
      }
    }
  }
  return r;
}

std::vector<float> ToFloat(const std::vector<double>& values) { return std::vector<float>(values.begin(), values.end()); }

const std::vector<Dims>& Problems() {
  static const std::vector<Dims> problems = {
      {{16, 4}, 64, 64, 32, 32},  // the transformer workload's heads
      {{2, 3}, 5, 7, 3, 4},       // row and column tails of every tile
      {{3}, 33, 17, 20, 48},      // packing edges (16 x 16 blocks and their remainders)
      {{}, 9, 130, 16, 5},        // rank 2, a long key axis
  };
  return problems;
}

TEST(ScaledDotProductAttentionTest, MatchesFloat64WithKeysEitherWayRound) {
  uint32_t seed = 1;
  for (const Dims& s : Problems()) {
    for (int trans_b = 0; trans_b < 2; ++trans_b) {
      SCOPED_TRACE(::testing::Message() << "Lq " << s.lq << " Lk " << s.lk << " D " << s.d << " Dv " << s.dv
                                        << " transB " << trans_b);
      const float scale = 0.37f;
      const Tensor q = RandomTensor(s.Of(s.lq, s.d), -2, 2, seed++);
      const Tensor keys = RandomTensor(trans_b ? s.Of(s.lk, s.d) : s.Of(s.d, s.lk), -2, 2, seed++);
      const Tensor v = RandomTensor(s.Of(s.lk, s.dv), -1, 1, seed++);
      const Tensor dout = RandomTensor(s.Of(s.lq, s.dv), -1, 1, seed++);
      const Reference r = ComputeReference(s, q, keys, v, dout, scale, trans_b);
      OpTester forward("ScaledDotProductAttention", kTraindTrainingVersion, kTraindTrainingDomain);
      forward.AddInputTensor("q", q).AddInputTensor("b", keys).AddInputTensor("v", v);
      forward.AddAttribute("scale", scale).AddAttribute("transB", int64_t{trans_b});
      forward.AddOutput<float>("o", s.Of(s.lq, s.dv), ToFloat(r.o)).AddOutput<float>("p", s.Of(s.lq, s.lk), ToFloat(r.p));
      forward.SetTolerance(1e-5, 1e-6).Run();

      OpTester backward("ScaledDotProductAttentionGrad", kTraindTrainingVersion, kTraindTrainingDomain);
      backward.AddInputTensor("dout", dout).AddInputTensor("q", q).AddInputTensor("b", keys).AddInputTensor("v", v);
      backward.AddInput<float>("p", s.Of(s.lq, s.lk), ToFloat(r.p));
      backward.AddAttribute("scale", scale).AddAttribute("transB", int64_t{trans_b});
      backward.AddOutput<float>("dq", q.shape(), ToFloat(r.dq))
          .AddOutput<float>("db", keys.shape(), ToFloat(r.db))
          .AddOutput<float>("dv", v.shape(), ToFloat(r.dv));
      backward.SetTolerance(1e-5, 1e-5).Run();
    }
  }
}

// The forward's P output and the gradient's outputs are optional: each wanted subset computes the same values.
TEST(ScaledDotProductAttentionTest, OptionalOutputsLeaveTheOthersUnchanged) {
  const Dims s{{2}, 6, 10, 4, 3};
  const Tensor q = RandomTensor(s.Of(s.lq, s.d), -1, 1, 50), keys = RandomTensor(s.Of(s.lk, s.d), -1, 1, 51);
  const Tensor v = RandomTensor(s.Of(s.lk, s.dv), -1, 1, 52), dout = RandomTensor(s.Of(s.lq, s.dv), -1, 1, 53);
  const Reference r = ComputeReference(s, q, keys, v, dout, 1.0f, /*trans_b=*/true);
  OpTester forward("ScaledDotProductAttention", kTraindTrainingVersion, kTraindTrainingDomain);
  forward.AddInputTensor("q", q).AddInputTensor("b", keys).AddInputTensor("v", v).AddAttribute("transB", int64_t{1});
  forward.AddOutput<float>("o", s.Of(s.lq, s.dv), ToFloat(r.o)).Run();
  for (int wanted = 1; wanted < 8; ++wanted) {
    SCOPED_TRACE(wanted);
    OpTester backward("ScaledDotProductAttentionGrad", kTraindTrainingVersion, kTraindTrainingDomain);
    backward.AddInputTensor("dout", dout).AddInputTensor("q", q).AddInputTensor("b", keys).AddInputTensor("v", v);
    backward.AddInput<float>("p", s.Of(s.lq, s.lk), ToFloat(r.p)).AddAttribute("transB", int64_t{1});
    const std::pair<const char*, const std::vector<double>*> outputs[] = {{"dq", &r.dq}, {"db", &r.db}, {"dv", &r.dv}};
    const Shape shapes[] = {q.shape(), keys.shape(), v.shape()};
    // Unwanted outputs come before wanted ones as empty names.
    int last = 0;
    for (int i = 0; i < 3; ++i) {
      if (wanted & (1 << i)) last = i;
    }
    for (int i = 0; i <= last; ++i) {
      if (wanted & (1 << i)) {
        backward.AddOutput<float>(outputs[i].first, shapes[i], ToFloat(*outputs[i].second));
      } else {
        backward.AddMissingOutput();
      }
    }
    backward.SetTolerance(1e-5, 1e-5).Run();
  }
}

TEST(ScaledDotProductAttentionTest, RefusesOperandsThatDoNotAgree) {
  struct Case {
    Shape q, b, v;
    const char* message;
  };
  for (const Case& c : {Case{{2, 4, 3}, {3, 3, 5}, {2, 5, 2}, "batch dims differ"},
                        Case{{2, 4, 3}, {2, 4, 5}, {2, 5, 2}, "inner dims differ"},
                        Case{{2, 4, 3}, {2, 3, 5}, {2, 6, 2}, "inner dims differ"},
                        Case{{4, 3}, {2, 3, 5}, {2, 5, 2}, "one rank"}}) {
    OpTester test("ScaledDotProductAttention", kTraindTrainingVersion, kTraindTrainingDomain);
    test.AddInputTensor("q", RandomTensor(c.q, -1, 1, 1)).AddInputTensor("b", RandomTensor(c.b, -1, 1, 2));
    test.AddInputTensor("v", RandomTensor(c.v, -1, 1, 3)).AddOutputShape("o", DataType::kFloat32, {1});
    const absl::StatusOr<std::vector<Tensor>> refused = test.RunRaw();
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
    EXPECT_NE(refused.status().message().find(c.message), std::string::npos) << refused.status();
  }
  // The gradient's dO and P must fit the forward's shapes.
  OpTester test("ScaledDotProductAttentionGrad", kTraindTrainingVersion, kTraindTrainingDomain);
  test.AddInputTensor("dout", RandomTensor({2, 4, 3}, -1, 1, 1)).AddInputTensor("q", RandomTensor({2, 4, 3}, -1, 1, 2));
  test.AddInputTensor("b", RandomTensor({2, 3, 5}, -1, 1, 3)).AddInputTensor("v", RandomTensor({2, 5, 2}, -1, 1, 4));
  test.AddInputTensor("p", RandomTensor({2, 4, 5}, 0, 1, 5)).AddOutputShape("dq", DataType::kFloat32, {2, 4, 3});
  const absl::StatusOr<std::vector<Tensor>> refused = test.RunRaw();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
}

}  // namespace
}  // namespace traind::engine
